"""One writer per run: its training process holds `<run>/state/run.lock` while it writes
the run's state (log, resume points, snapshots).

Snakemake's own lock compares paths as written, and the outdir lock guards only the
start-up repair, so two invocations reaching one outdir by two paths (a symlink) could
resume the same run at once and interleave its log. `flock` locks the file itself, not a
path: a second process refuses whatever path reached the run, in one line, before it
writes anything. The lock goes with its process (a kill -9 included), so nothing stale
is left behind.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import socket
import sys
from pathlib import Path
from typing import IO

LOCK = "run.lock"


NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)  # a file system without flock


class RunBusyError(RuntimeError):
    """Another process is training this run; the message is one line naming it."""


def try_lock(fh: IO, path: Path, unguarded: str) -> bool:
    """flock `fh` (the open lock file `path`) exclusively, without waiting: False when
    another process holds it. On a file system without file locks (some network mounts)
    say so in one line ending in what goes `unguarded`, and go on as if it were held:
    the work is not refused for a guard the file system cannot give."""
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno not in NO_LOCKS:
            raise
        print(
            f"mbc: {path}: no file locks on this file system ({exc.strerror}): {unguarded}",
            file=sys.stderr,
        )
    return True


def hold(state_dir: str | os.PathLike) -> IO:
    """Hold the run's lock until the returned file is closed (`release`) or the process
    ends; RunBusyError when another process holds it."""
    path = Path(state_dir).resolve() / LOCK  # the message names the run, not the link
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, "a+")  # noqa: SIM115 - held open on purpose until release()
    if not try_lock(fh, path, "a second process on this run is not refused"):
        fh.seek(0)
        holder = fh.read().strip() or "another process"
        fh.close()
        raise RunBusyError(
            f"{path.parent.parent}: {holder} is training this run; this job wrote nothing "
            "(two snakemake invocations on one outdir, by two paths?): wait for it to end"
        )
    fh.truncate(0)
    fh.write(f"process {os.getpid()} on {socket.gethostname()}{machine_tag()}\n")
    fh.flush()
    return fh


def machine_tag() -> str:
    """ " (boot B, pid namespace N)": which kernel boot and pid namespace the pid belongs
    to, so that `mbc.status` checks a holder's pid only where it means the same process
    (two machines, or a container and its host, can share a host name). Empty where
    /proc does not say."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return ""
    return f" (boot {boot}, pid namespace {ns})"


def local_holder(state_dir: str | os.PathLike) -> int | None:
    """The pid of the process that last held the run's lock (`hold`'s line), where it ran on
    this machine (host, boot and pid namespace: there the pid means that process); None for
    a holder elsewhere, a line written without the machine's tag, no lock file, or a
    corrupt one."""
    tag = machine_tag()
    try:
        text = (Path(state_dir) / LOCK).read_text(errors="replace")
    except OSError:
        return None
    m = re.fullmatch(r"process (\d{1,9}) on (.+?)\s*", text)
    if not tag or not m or m.group(2) != f"{socket.gethostname()}{tag}":
        return None
    return int(m.group(1))


def release(fh: IO | None) -> None:
    if fh is not None:
        fh.close()  # closing the file releases its flock
