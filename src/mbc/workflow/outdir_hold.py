"""One invocation at a time on an outdir: the lock `<outdir>/.mbc/outdir.lock`.

The main Snakemake process of an invocation that runs jobs takes it while the Snakefile is
parsed (`take_outdir`), before it repairs or plans anything, and keeps it until it exits; any
other invocation (a dry run, `--lint`, `--summary`, ...) only probes (`held_elsewhere`,
`outdir_in_use`) and holds nothing. `stale_lock` tells a killed run's Snakemake locks from a
live invocation's, to say how to clear them (a message only: nothing depends on Snakemake's
lock format). The repair that runs under the lock is `mbc.workflow.integrity`'s.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from mbc.core import run_lock
from mbc.core.artifacts import unwritable
from mbc.core.layout import Layout

_HELD: dict[Path, object] = {}  # outdir lock path -> its open file, held by this process


def hold_outdir(outdir: str | os.PathLike) -> bool:
    """Hold `<outdir>/.mbc/outdir.lock` for the rest of this process (the main Snakemake
    process of an invocation that runs jobs): False when another invocation holds it.
    Repair and jobs run only under it, so a second `snakemake` on a running outdir, by
    whatever path, stops before it deletes or writes anything. The file is not inherited by
    the jobs (Python opens files non-inheritable), so the lock ends with this process. A lock
    that cannot be opened (a directory in its place) stops the process in one line
    (SystemExit), before any repair."""
    path = Layout(str(outdir)).lock.resolve()
    if path in _HELD:  # (the Snakefile parsed again in this process)
        return True
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path, "a")  # noqa: SIM115 - held open on purpose until the process exits
    except OSError as exc:  # checked before the repair touches anything: one line, stop
        what = "a directory" if path.is_dir() else exc.strerror
        raise SystemExit(
            f"mbc: {path} cannot be the outdir's lock ({what}): remove it and run again"
        ) from None
    unguarded = "a second snakemake on this outdir is not detected"
    for attempt in range(10):  # a dry run's probe (`outdir_in_use`) holds it for microseconds
        if run_lock.try_lock(fh, path, unguarded):
            break
        if attempt == 9:
            fh.close()
            return False
        time.sleep(0.05)
    _HELD[path] = fh
    return True


def take_outdir(outdir: str | os.PathLike) -> None:
    """What an invocation that runs jobs does first, before the repair: check that the outdir
    can be written, then hold it (`hold_outdir`) for the rest of the process. Either failure
    stops it in one line naming the outdir (SystemExit), having changed nothing."""
    if why := unwritable(outdir):
        raise SystemExit(f"mbc: outdir '{outdir}' cannot be written to: {why}")
    if not hold_outdir(outdir):
        raise SystemExit(busy_line(outdir))


def busy_line(outdir: str | os.PathLike) -> str:
    """The one line an invocation stops with while another holds the outdir."""
    return (
        f"mbc: another snakemake is running on {outdir}/: nothing repaired or run here; "
        "wait for it to end"
    )


def outdir_in_use(outdir: str | os.PathLike) -> bool:
    """Whether an invocation holds the outdir now (`held_elsewhere`), or its lock cannot be
    opened (`hold_outdir` says why, in one line)."""
    path = Layout(str(outdir)).lock.resolve()
    return (path.exists() and not path.is_file()) or held_elsewhere(outdir)


def held_elsewhere(outdir: str | os.PathLike) -> bool:
    """Whether another invocation holds the outdir now: probed and released at once, so that
    an invocation that runs no jobs holds nothing. This process's own lock is not
    another's."""
    path = Layout(str(outdir)).lock.resolve()
    if path in _HELD:
        return False
    if not path.is_file():
        return False
    try:
        with open(path, "a") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(fh, fcntl.LOCK_UN)
    except OSError:  # unreadable, or no file locks here: nobody is known to hold it
        return False
    return False


def stale_lock(locks_dir: str | os.PathLike, outdir: str | os.PathLike) -> bool:
    """Whether Snakemake's locks (`<workdir>/.snakemake/locks/*.lock`, one path a line)
    hold a file of `outdir`. Asked only while no invocation holds the outdir
    (`outdir_in_use`), so no live invocation owns them: a killed run left them."""
    root = str(Path(outdir).resolve())
    for lock in Path(locks_dir).glob("*.lock"):
        try:
            lines = lock.read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        held = (str(Path(p).resolve()) for p in lines)
        if any(q == root or q.startswith(root + os.sep) for q in held):
            return True
    return False
