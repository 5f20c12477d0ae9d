"""Send a rule script's stdout/stderr to its Snakemake log file (and keep the console).

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
        except CorruptArtifactError as exc:
            traceback.print_exc()
            for bad in exc.invalidate:
                if bad.exists():
                    aside = bad.with_name(bad.name + f".corrupt-{int(time.time())}")
                    bad.rename(aside)
                    print(f"mbc: moved {bad} aside to {aside}", file=sys.stderr)
            print(f"mbc: corrupt input detected: {exc}. Rerun the workflow to regenerate it.",
                  file=sys.stderr)  # fmt: skip
            raise
        except BaseException:
            traceback.print_exc()
            raise
        finally:
            sys.stdout, sys.stderr = out, err
