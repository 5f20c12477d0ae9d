"""Send a rule script's stdout/stderr to its Snakemake log file (and keep the console)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path


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
        except BaseException:
            import traceback

            traceback.print_exc()
            raise
        finally:
            sys.stdout, sys.stderr = out, err
