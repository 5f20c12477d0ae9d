"""What produced a run: the code's commit and the machine, written into each run's log at
every start of its training (`mbc.training.record.RunRecord`) and read back by
`mbc.measured` for a measured report's PROVENANCE."""

from __future__ import annotations

import functools
import platform
import subprocess
import time
from pathlib import Path

import torch

import mbc

REPO = Path(mbc.__file__).resolve().parents[2]


@functools.cache
def code_version() -> dict:
    """{"commit": the package's git commit or None (not a git checkout), "dirty": whether
    tracked files differ from it}."""
    try:

        def git(*args: str) -> str:
            return subprocess.run(
                ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True,
                timeout=30,
            ).stdout.strip()  # fmt: skip

        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": dirty}


@functools.cache
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def now() -> str:
    """UTC wall-clock time, ISO 8601 to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def start_event(step: int) -> dict:
    """The log line of a training start at `step` (> 0: a resumption)."""
    return {
        "event": "start",
        "step": step,
        "time": now(),
        **code_version(),
        "host": platform.node(),
        "cpu": cpu_model(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
