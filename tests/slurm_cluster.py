"""A real, single-node Slurm cluster for tests, started and stopped by the test itself.

Usage (as root, with Debian's `slurm-wlm` and `munge` installed)::

    from slurm_cluster import local_slurm

    with local_slurm(tmp_path / "slurm") as cluster:
        subprocess.run(["snakemake", "--profile", "profiles/slurm-test", ...], check=True)
        cluster.squeue()  # [(jobid, state, name), ...]

What `local_slurm` does, and why:

* **munge**: a private `munged` (our own key, socket, pid, seed and log files) runs in the
  foreground as a child process. It never touches the system munge (`/etc/munge`,
  `/run/munge`), so it works whether or not a system `munged` is already running and the
  cluster's credentials cannot be confused with anyone else's. Slurm is pointed at the
  private socket with `AuthInfo=socket=...`.
* **slurm.conf** is written to `/etc/slurm/slurm.conf` (an existing file is moved aside and
  put back on exit). It has to be the compiled-in default path: the slurm-jobstep executor
  that runs *inside* each job strips every `SLURM_*` variable, `SLURM_CONF` included,
  before its nested `srun`, so a config anywhere else is invisible there. A copy is kept
  in the work directory. Only one `local_slurm` can be active per machine (a lock file
  enforces this).
* **ports**: `SlurmctldPort` / `SlurmdPort` are free ports picked at start, so a stale
  daemon from an earlier crashed run cannot collide with this one.
* **state and logs** (StateSaveLocation, daemon logs, the conf copy) live under the given
  work directory and are left there for post-mortems. Unix sockets (munge, slurmd spool)
  live in a short-named temporary directory under /tmp, because socket paths are limited
  to ~107 bytes and pytest's tmp paths can be longer; that directory is removed on exit.
* `slurmctld -D` and `slurmd -D` run in the foreground as our children. On exit every
  job still known to the cluster is cancelled, then slurmd, slurmctld and munged are
  stopped by pid (SIGTERM, then SIGKILL after a grace period) and reaped.

The node has no GPUs and no accounting (`sacct` does not work): use the squeue status
command (see profiles/slurm-test/config.yaml).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "LocalSlurm",
    "SlurmNotAvailable",
    "SlurmStartupError",
    "local_slurm",
    "missing_binaries",
]

REQUIRED_BINARIES = (
    "munged",
    "munge",
    "unmunge",
    "slurmctld",
    "slurmd",
    "sinfo",
    "squeue",
    "sbatch",
    "srun",
    "scancel",
    "scontrol",
)
INSTALL_HINT = (
    "install them with `apt-get update && "
    "DEBIAN_FRONTEND=noninteractive apt-get install -y slurm-wlm munge`"
)
SLURM_CONF = Path("/etc/slurm/slurm.conf")
# Job states after which nothing runs any more (squeue --states=all shows them for MinJobAge).
FINISHED_STATES = frozenset(
    [
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "SPECIAL_EXIT",
        "TIMEOUT",
    ]
)
LOCK_FILE = Path("/etc/slurm/.local_slurm.lock")
MARKER = "# written by tests/slurm_cluster.py (local_slurm); removed when it exits"


class SlurmNotAvailable(RuntimeError):
    """Slurm/munge binaries are missing, or we are not root."""


class SlurmStartupError(RuntimeError):
    """The daemons were started but the cluster did not become usable."""


def missing_binaries() -> list[str]:
    """Names from REQUIRED_BINARIES that are not on PATH (empty list: all present)."""
    return [b for b in REQUIRED_BINARIES if _which(b) is None]


def _which(name: str) -> str | None:
    """shutil.which, also looking in the sbin dirs (daemons; often not on a user's PATH)."""
    path = os.pathsep.join([os.environ.get("PATH", os.defpath), "/usr/sbin", "/sbin"])
    return shutil.which(name, path=path)


@dataclass
class LocalSlurm:
    """Handle on a running local cluster (yielded by `local_slurm`)."""

    workdir: Path
    conf_path: Path
    nodename: str
    partition: str
    cpus: int
    real_memory_mb: int
    ctld_port: int
    slurmd_port: int
    env: dict[str, str] = field(repr=False)
    logs: dict[str, Path] = field(repr=False)
    pids: dict[str, int] = field(default_factory=dict)

    def run(
        self, *args: str, check: bool = True, timeout: float = 30
    ) -> subprocess.CompletedProcess:
        """Run a Slurm client command (e.g. `run("scontrol", "show", "job", "3")`)."""
        return subprocess.run(
            list(args),
            env=self.env,
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )

    def squeue(self) -> list[tuple[str, str, str]]:
        """All jobs slurmctld still knows (finished ones for MinJobAge): (id, state, name)."""
        out = self.run("squeue", "--states=all", "--noheader", "--format=%i|%T|%j").stdout
        return [tuple(line.split("|", 2)) for line in out.splitlines() if line.strip()]

    def wait_for_state(self, jobid: str, states: set[str], timeout: float = 60) -> str:
        """Poll until job `jobid` is in one of `states`; return the state."""
        deadline = time.monotonic() + timeout
        state = "?"
        while time.monotonic() < deadline:
            for jid, state_now, _ in self.squeue():
                if jid == str(jobid):
                    state = state_now
                    if state in states:
                        return state
            time.sleep(0.5)
        raise TimeoutError(f"job {jobid} still {state!r} after {timeout}s (wanted {states})")

    def cancel_all(self, timeout: float = 30) -> None:
        """scancel every job that is not finished, and wait until none is left running."""
        deadline = time.monotonic() + timeout
        while True:
            ids = [jid for jid, state, _ in self.squeue() if state not in FINISHED_STATES]
            if not ids:
                return
            self.run("scancel", *ids, check=False)
            if time.monotonic() > deadline:
                raise TimeoutError(f"jobs {ids} still not finished {timeout}s after scancel")
            time.sleep(0.5)

    def log_tail(self, n: int = 40) -> str:
        """The last `n` lines of each daemon log, for error messages."""
        return _log_tail(self.logs, n)


def _log_tail(logs: dict[str, Path], n: int = 40) -> str:
    parts = []
    for name, path in logs.items():
        try:
            lines = path.read_text(errors="replace").splitlines()[-n:]
        except OSError:
            lines = ["<not readable>"]
        parts.append(f"--- {name} ({path}) ---\n" + "\n".join(lines))
    return "\n".join(parts)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_free_ports() -> tuple[int, int]:
    a = _free_port()
    b = _free_port()
    while b == a:
        b = _free_port()
    return a, b


def _detect_hardware() -> tuple[int, int]:
    """(CPUs usable by this process, physical memory in MB) as slurmd would see them."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    mem_mb = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            [_which("slurmd") or "slurmd", "-C"], capture_output=True, text=True, timeout=20
        ).stdout
        m = re.search(r"RealMemory=(\d+)", out)
        if m:
            mem_mb = int(m.group(1))
    if mem_mb is None:
        mem_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    return cpus, mem_mb


def _write_conf(
    *,
    nodename: str,
    partition: str,
    cpus: int,
    real_memory_mb: int,
    ctld_port: int,
    slurmd_port: int,
    munge_socket: Path,
    state_dir: Path,
    spool_dir: Path,
    log_dir: Path,
    run_dir: Path,
    min_job_age: int,
) -> str:
    return f"""{MARKER}
ClusterName=local
SlurmctldHost={nodename}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={state_dir}
SlurmdSpoolDir={spool_dir}
SlurmctldPidFile={run_dir}/slurmctld.pid
SlurmdPidFile={run_dir}/slurmd.pid
SlurmctldLogFile={log_dir}/slurmctld.log
SlurmdLogFile={log_dir}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Containers often report less than the host has; trust this file, do not drain.
SlurmdParameters=config_overrides
ReturnToService=2
# squeue (the status command without accounting) sees finished jobs this long.
MinJobAge={min_job_age}
KillWait=5
InactiveLimit=0
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
NodeName={nodename} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={real_memory_mb} State=UNKNOWN
PartitionName={partition} Nodes={nodename} Default=YES MaxTime=INFINITE State=UP
"""


def _is_ours(path: Path) -> bool:
    """True for a slurm.conf written by local_slurm (possibly left by a crashed run)."""
    try:
        with open(path, errors="replace") as fh:
            return fh.readline().rstrip("\n") == MARKER
    except OSError:
        return False


def _stop(proc: subprocess.Popen | None, grace: float = 10) -> None:
    """Stop one child we started: SIGTERM, wait, SIGKILL; always reap."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=grace)


def _wait_until(pred, timeout: float, what: str, procs: dict[str, subprocess.Popen], logs) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, p in procs.items():
            if p.poll() is not None:
                raise SlurmStartupError(
                    f"{name} exited with code {p.returncode} while waiting for {what}\n{logs()}"
                )
        if pred():
            return
        time.sleep(0.25)
    raise SlurmStartupError(f"timed out after {timeout}s waiting for {what}\n{logs()}")


@contextlib.contextmanager
def local_slurm(
    workdir: str | os.PathLike,
    *,
    cpus: int | None = None,
    real_memory_mb: int | None = None,
    partition: str = "debug",
    min_job_age: int = 300,
    start_timeout: float = 60,
) -> Iterator[LocalSlurm]:
    """Start munged, slurmctld and slurmd for one node; yield a `LocalSlurm`; stop them.

    cpus: CPUs of the node (default: those this process may use).
    real_memory_mb: node memory (default: 90% of what slurmd detects, so it always fits).
    min_job_age: seconds a finished job stays visible to squeue; keep it well above
        3x the profile's `slurm-init-seconds-before-status-checks`, else the plugin
        falls back to sacct, which does not work without accounting.

    While the context is active, os.environ["SLURM_CONF"] points at the config, so
    subprocesses (snakemake, sbatch, ...) find the cluster. Raises SlurmNotAvailable
    when the binaries are missing or we are not root, SlurmStartupError (with the
    daemon log tails) when the cluster does not come up.
    """
    missing = missing_binaries()
    if missing:
        raise SlurmNotAvailable(
            f"Slurm/munge binaries not found: {', '.join(missing)}; {INSTALL_HINT}"
        )
    if os.geteuid() != 0:
        raise SlurmNotAvailable(
            "local_slurm must run as root (it writes /etc/slurm and runs daemons)"
        )

    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    state_dir, log_dir = workdir / "slurmctld-state", workdir / "log"
    shutil.rmtree(state_dir, ignore_errors=True)  # a reused workdir must not revive old jobs
    for d in (state_dir, log_dir):
        d.mkdir(exist_ok=True)

    hw_cpus, hw_mem = _detect_hardware()
    cpus = cpus or hw_cpus
    real_memory_mb = real_memory_mb or max(256, int(hw_mem * 0.9))
    nodename = socket.gethostname().split(".")[0]
    ctld_port, slurmd_port = _two_free_ports()

    SLURM_CONF.parent.mkdir(parents=True, exist_ok=True)
    lock_fh = open(LOCK_FILE, "w")  # noqa: SIM115 - held for the whole context
    try:
        fcntl.flock(lock_fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock_fh.close()
        raise SlurmStartupError(
            f"another local_slurm is active on this machine (lock {LOCK_FILE} is held)"
        ) from None

    rt = Path(tempfile.mkdtemp(prefix="lslurm-", dir="/tmp"))  # short: socket paths
    munge_dir, key_dir, spool_dir = rt / "munge", rt / "key", rt / "slurmd"
    for d, mode in ((munge_dir, 0o755), (key_dir, 0o700), (spool_dir, 0o755)):
        d.mkdir()
        d.chmod(mode)
    rt.chmod(0o755)
    munge_socket = munge_dir / "munge.socket"
    logs = {
        "munged": log_dir / "munged.out",  # --foreground: munged logs to stderr
        "slurmctld": log_dir / "slurmctld.log",
        "slurmd": log_dir / "slurmd.log",
        "slurmctld stdout": log_dir / "slurmctld.out",
        "slurmd stdout": log_dir / "slurmd.out",
    }

    saved_conf = None
    old_env_conf = os.environ.get("SLURM_CONF")
    procs: dict[str, subprocess.Popen] = {}
    out_files = []
    cluster = None
    try:
        # --- munge -------------------------------------------------------------------
        key = key_dir / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        fh = open(logs["munged"], "w")  # noqa: SIM115 - closed in finally
        out_files.append(fh)
        procs["munged"] = subprocess.Popen(
            [
                _which("munged"),
                "--foreground",
                "--force",
                f"--socket={munge_socket}",
                f"--key-file={key}",
                f"--pid-file={munge_dir / 'munged.pid'}",
                f"--seed-file={key_dir / 'munged.seed'}",
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

        def munge_ok() -> bool:
            if not munge_socket.exists():
                return False
            cred = subprocess.run(
                ["munge", "-n", "-S", str(munge_socket)], capture_output=True, timeout=10
            )
            if cred.returncode != 0:
                return False
            dec = subprocess.run(
                ["unmunge", "-S", str(munge_socket)],
                input=cred.stdout,
                capture_output=True,
                timeout=10,
            )
            return dec.returncode == 0 and b"Success" in dec.stdout

        def tails() -> str:
            return _log_tail(logs)

        _wait_until(munge_ok, 20, "munge -n | unmunge to report Success", procs, tails)

        # --- slurm.conf ----------------------------------------------------------------
        text = _write_conf(
            nodename=nodename,
            partition=partition,
            cpus=cpus,
            real_memory_mb=real_memory_mb,
            ctld_port=ctld_port,
            slurmd_port=slurmd_port,
            munge_socket=munge_socket,
            state_dir=state_dir,
            spool_dir=spool_dir,
            log_dir=log_dir,
            run_dir=rt,
            min_job_age=min_job_age,
        )
        if (SLURM_CONF.exists() or SLURM_CONF.is_symlink()) and not _is_ours(SLURM_CONF):
            saved_conf = workdir / "slurm.conf.orig"  # someone else's: put back on exit
            shutil.move(SLURM_CONF, saved_conf)
        SLURM_CONF.write_text(text)
        (workdir / "slurm.conf").write_text(text)

        env = dict(os.environ, SLURM_CONF=str(SLURM_CONF))
        for var in [v for v in env if v.startswith(("SLURM_", "SBATCH_", "SRUN_", "SQUEUE_"))]:
            if var != "SLURM_CONF":
                del env[var]  # e.g. running the tests inside a Slurm job elsewhere

        # --- daemons ---------------------------------------------------------------------
        for name, argv in (
            ("slurmctld", [_which("slurmctld"), "-D", "-f", str(SLURM_CONF)]),
            ("slurmd", [_which("slurmd"), "-D", "-f", str(SLURM_CONF), "-N", nodename]),
        ):
            fh = open(logs[f"{name} stdout"], "w")  # noqa: SIM115 - closed in finally
            out_files.append(fh)
            procs[name] = subprocess.Popen(
                argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
            if name == "slurmctld":

                def ctld_up() -> bool:
                    r = subprocess.run(
                        ["scontrol", "ping"], env=env, capture_output=True, text=True, timeout=10
                    )
                    return "UP" in r.stdout

                _wait_until(ctld_up, start_timeout, "slurmctld to answer ping", procs, tails)

        cluster = LocalSlurm(
            workdir=workdir,
            conf_path=SLURM_CONF,
            nodename=nodename,
            partition=partition,
            cpus=cpus,
            real_memory_mb=real_memory_mb,
            ctld_port=ctld_port,
            slurmd_port=slurmd_port,
            env=env,
            logs=logs,
            pids={k: p.pid for k, p in procs.items()},
        )

        def node_idle() -> bool:
            r = cluster.run("sinfo", "-h", "-N", "-o", "%t", check=False)
            return r.stdout.strip() == "idle"  # "idle*" would mean not responding

        _wait_until(node_idle, start_timeout, f"sinfo to show node {nodename} idle", procs, tails)
        r = cluster.run("srun", "-N1", "hostname", check=False, timeout=start_timeout)
        if r.returncode != 0:
            raise SlurmStartupError(
                f"`srun -N1 hostname` failed ({r.returncode}): {r.stderr}\n{tails()}"
            )

        os.environ["SLURM_CONF"] = str(SLURM_CONF)
        yield cluster
    finally:
        try:
            if cluster is not None and procs["slurmctld"].poll() is None:
                with contextlib.suppress(Exception):
                    cluster.cancel_all(timeout=30)
        finally:
            for name in ("slurmd", "slurmctld", "munged"):
                _stop(procs.get(name))
            for fh in out_files:
                fh.close()
            if old_env_conf is None:
                os.environ.pop("SLURM_CONF", None)
            else:
                os.environ["SLURM_CONF"] = old_env_conf
            if _is_ours(SLURM_CONF):
                SLURM_CONF.unlink()
            if saved_conf is not None:
                shutil.move(saved_conf, SLURM_CONF)
            shutil.rmtree(rt, ignore_errors=True)
            fcntl.flock(lock_fh, fcntl.LOCK_UN)
            lock_fh.close()


if __name__ == "__main__":  # manual smoke check: python tests/slurm_cluster.py [workdir]
    import sys

    wd = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="local-slurm-")
    t0 = time.monotonic()
    with local_slurm(wd) as c:
        print(f"up in {time.monotonic() - t0:.1f}s: {c}")
        print(c.run("sinfo").stdout)
    print(f"down after {time.monotonic() - t0:.1f}s; logs in {wd}")
