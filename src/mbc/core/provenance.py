"""What produced a run: the code's commit and the machine, written into each run's log at
every start of its training (`mbc.training.record.RunRecord`) and read back by
`mbc.measured` for a measured report's PROVENANCE."""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import time
from pathlib import Path

import torch

import mbc

REPO = Path(mbc.__file__).resolve().parents[2]
# this process, among every training job's: the runs of one pack log the same key
_JOB = f"{platform.node()}:{os.getpid()}:{time.time():.0f}"


@functools.cache
def code_version() -> dict:
    """{"commit": the package's git commit or None (not a git checkout), "dirty": whether
    tracked files differ from it}. A launcher that copied the tree elsewhere (a device lease)
    names its commit in MBC_CODE_COMMIT, which wins: the copy's .git, if any, can be stale
    (one such copy reported its session's first commit, with uncommitted changes)."""
    if launcher_commit := os.environ.get("MBC_CODE_COMMIT"):
        return {"commit": launcher_commit, "dirty": None}
    try:

        def git(*args: str) -> str:
            return subprocess.run(
                ["git", "-C", str(REPO), *args],
                capture_output=True,
                text=True,
                check=True,
                timeout=30,
            ).stdout.strip()

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


def device_name(device: torch.device | str | None) -> str:
    """ "cpu", or "cuda (<the GPU's name>)": where a run's steps ran."""
    if device is None or (device := torch.device(device)).type != "cuda":
        return "cpu"
    return f"cuda ({torch.cuda.get_device_name(device)})"


def start_event(step: int, device: torch.device | None = None) -> dict:
    """The log line of a training start at `step` (> 0: a resumption) on `device`."""
    return {
        "event": "start",
        "step": step,
        "time": now(),
        **code_version(),
        "host": platform.node(),
        "job": _JOB,  # mbc.measured counts a pack's runs, which share this clock, as one job
        "cpu": cpu_model(),
        "device": device_name(device),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
