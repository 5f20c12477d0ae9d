"""Send a rule script's stdout/stderr to its Snakemake log file (and keep the console).

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

from mbc.core.artifacts import CorruptArtifactError
from mbc.core.run_lock import RunBusyError


class _Tee:
    def __init__(self, *streams):
        self.streams = streams

    def write(self, s):
        for st in self.streams:
            st.write(s)
            st.flush()
        return len(s)

    def flush(self):
        for st in self.streams:
            st.flush()


@contextlib.contextmanager
def logged(path: str | os.PathLike | None) -> Iterator[None]:
    """Append everything printed inside the block to `path`; exceptions land there too."""
    if not path:
        yield
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        out, err = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Tee(out, fh), _Tee(err, fh)
        try:
            yield
        except BaseException as exc:
            if (line := _fault_line(exc)) is None:
                traceback.print_exc()  # a bug: the whole traceback, console and log
                raise
            # a fault the pipeline knows: its traceback in the job's log (mbc.status reads
            # it there), one line on the console, and the job fails without a second one
            traceback.print_exc(file=fh)
            print(line, file=sys.stderr)
            raise SystemExit(1) from None
        finally:
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
