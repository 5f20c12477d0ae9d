"""Send a rule script's stdout/stderr to its Snakemake log file, not to the console.

The console keeps what a person watching needs: the lines a job says with `console` (a
training run's "done" line) and, when a job fails, one line naming its log, then the
traceback that Python prints on the way out.

A corrupt input (CorruptArtifactError) is moved aside with a clear message, so that the
next workflow run regenerates it instead of reading it as data.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

from mbc.core.artifacts import CorruptArtifactError

_TERMINAL: list = []  # the console streams of the `logged` block in force (innermost last)


def console(message: str) -> None:
    """Print `message` to the log and, inside a `logged` block, to the console too."""
    print(message)
    if _TERMINAL:
        print(message, file=_TERMINAL[-1], flush=True)


@contextlib.contextmanager
def logged(path: str | os.PathLike | None) -> Iterator[None]:
    """Append everything printed inside the block to `path` (the console sees only
    `console` lines and a failure's one line); exceptions land there too."""
    if not path:
        yield
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        out, err = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = fh
        _TERMINAL.append(err)
        try:
            yield
        except CorruptArtifactError as exc:
            traceback.print_exc()
            for bad in exc.invalidate:
                if bad.exists():
                    aside = bad.with_name(bad.name + f".corrupt-{int(time.time())}")
                    bad.rename(aside)
                    console(f"mbc: moved {bad} aside to {aside}")
            console(f"mbc: corrupt input detected: {exc}. Rerun the workflow to regenerate it.")
            raise
        except BaseException:
            traceback.print_exc()
            print(f"mbc: failed, the whole story is in {path}", file=err, flush=True)
            raise
        finally:
            fh.flush()
            _TERMINAL.pop()
            sys.stdout, sys.stderr = out, err
