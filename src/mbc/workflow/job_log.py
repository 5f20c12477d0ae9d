"""Send a rule script's stdout/stderr to its Snakemake log file, not to the console.

The console keeps what a person watching needs: the lines a job says with `console` (a
training run's "done" line), its WARNING lines and, when a job fails, one line naming its
log, then the traceback that Python prints on the way out.

A corrupt input (CorruptArtifactError) is moved aside with a clear message, so that the
next workflow run regenerates it instead of reading it as data. A known fault (a corrupt
input, a run another process trains, Ctrl-C, a full disk) ends the job in one console
line; its traceback goes to the job's log only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

from mbc.core.artifacts import CorruptArtifactError, built_under
from mbc.core.run_lock import RunBusyError

_TERMINAL: list = []  # the console streams of the `logged` block in force (innermost last)


class _Log:
    """A job's stdout/stderr inside `logged`: every line to the log file; a line that
    starts with "WARNING" to the console too (a code path that cannot call `console`, such
    as a training run's corrupt resume point, still reaches the person watching)."""

    def __init__(self, fh, terminal):
        self.fh, self.terminal, self._line = fh, terminal, ""

    def write(self, s: str) -> int:
        self.fh.write(s)
        *done, self._line = (self._line + s).split("\n")
        for line in done:
            if line.startswith("WARNING"):
                print(line, file=self.terminal, flush=True)
        return len(s)

    def flush(self) -> None:
        self.fh.flush()

    def __getattr__(self, name):  # encoding, fileno, isatty: the log file's
        return getattr(self.fh, name)


def console(message: str) -> None:
    """Print `message` to the log and, inside a `logged` block, to the console too."""
    print(message)
    if _TERMINAL:
        print(message, file=_TERMINAL[-1], flush=True)


@contextlib.contextmanager
def logged(path: str | os.PathLike | None, params=None) -> Iterator[None]:
    """Append everything printed inside the block to `path` (the console sees only
    `console` lines and a failure's one line); exceptions land there too. `params`: the
    rule's (Snakemake's `snakemake.params`): every table written inside the block records
    its `config_id` (`mbc.core.artifacts.built_under`)."""
    with built_under(getattr(params, "config_id", None)):
        yield from _logged(path)


def _logged(path: str | os.PathLike | None) -> Iterator[None]:
    if not path:
        yield
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    # line-buffered: a training job's progress lines reach its log as they are said (block
    # buffering held a pack's lines back for minutes, so a log being watched looked empty)
    with open(path, "a", buffering=1) as fh:
        out, err = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = _Log(fh, err)
        _TERMINAL.append(err)
        try:
            yield
        except BaseException as exc:
            traceback.print_exc()  # into the job's log (mbc.status reads it there)
            if (line := _fault_line(exc)) is None:  # a bug: the log has the whole story
                print(f"mbc: failed, the whole story is in {path}", file=err, flush=True)
                raise
            # a fault the pipeline knows: one line on the console, in the log too, and the
            # job fails without a second traceback
            print(line, file=fh, flush=True)
            print(line, file=err, flush=True)
            raise SystemExit(1) from None
        finally:
            fh.flush()
            _TERMINAL.pop()
            sys.stdout, sys.stderr = out, err


def _fault_line(exc: BaseException) -> str | None:
    """The one line a known fault ends in (a corrupt input moved aside first), else None."""
    if isinstance(exc, CorruptArtifactError):
        moved = []
        for bad in exc.invalidate:
            if bad.exists():
                aside = bad.with_name(bad.name + f".corrupt-{int(time.time())}")
                bad.rename(aside)
                moved.append(f"; moved {bad} aside to {aside.name}")
        return f"mbc: corrupt input detected: {exc}{''.join(moved)}. Rerun the workflow to regenerate it."
    if isinstance(exc, RunBusyError):
        return f"mbc: {exc}"
    if isinstance(exc, KeyboardInterrupt):
        return "mbc: interrupted; a run resumes from its last resume point at the next snakemake"
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return (
            f"mbc: no space left on the device writing {exc.filename or 'a file'}: free some "
            "and rerun (a run resumes from its last resume point)"
        )
    return None
