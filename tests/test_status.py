import dataclasses
import json
import math
import os
import time
from pathlib import Path

import pytest
from helpers import tiny_spec

from mbc import config as mbc_config
from mbc.core.journal import read_journal
from mbc.core.packing import make_packs
from mbc.status import main, status
from mbc.training.data import build_dataset
from mbc.training.train import train_run

ROOT = Path(__file__).resolve().parents[1]


def _config(outdir, pack: bool = False) -> mbc_config.Config:
    """Two tiny runs of one experiment (a fixture, not config.yaml's presets)."""
    runs = tuple(mbc_config.Run("E1", dataclasses.replace(tiny_spec(), seed=s)) for s in (0, 1))
    raw = {"pack": {"enabled": pack, "max_runs": 2}}
    return mbc_config.Config(raw=raw, preset="fixture", outdir=str(outdir), runs=runs)


def _quiet_log(run_dir: Path) -> None:
    """A run stopped at step 40 whose live log has been quiet for an hour."""
    log = run_dir / "state" / "log.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text(json.dumps({"step": 40, "candidate_loss": 1.0}) + "\n")
    old = time.time() - 3600
    os.utime(log, (old, old))


def test_status_reads_each_state_from_disk(tmp_path):
    cfg = _config(tmp_path)
    (a, sa), (b, sb) = list(cfg.specs.items())
    runs = tmp_path / "runs"
    # a: trained and summarised
    train_run(sa, build_dataset(sa.task, sa.seed), runs / a, "cpu", say=lambda s: None)
    (runs / a / "summary.json").write_text(json.dumps({"tau": 30, "censored": False, "steps": 100}))
    # b: stopped mid-run, quiet for longer than --stale-s, its job log ends in a traceback
    train_run(
        sb, build_dataset(sb.task, sb.seed), runs / b, "cpu", say=lambda s: None, stop_after=40
    )
    old = time.time() - 3600
    os.utime(runs / b / "state" / "log.jsonl", (old, old))
    t = status(cfg, stale_s=60).set_index("run_id")
    assert t.loc[a, "state"] == "done" and t.loc[a, "tau"] == 30
    assert t.loc[b, "state"] == "interrupted" and t.loc[b, "step"] == 40
    evals = [r for r in read_journal(runs / b / "state" / "log.jsonl") if "event" not in r]
    assert evals[-1]["step"] == 40  # the last evaluation logged: its L_cand / log K
    assert t.loc[b, "lcand_over_log_k"] == evals[-1]["candidate_loss"] / math.log(sb.task.k)
    (tmp_path / "logs" / "train").mkdir(parents=True)
    (tmp_path / "logs" / "train" / f"{b}.log").write_text("Traceback (most recent call last):\n")
    assert status(cfg, stale_s=60).set_index("run_id").loc[b, "state"] == "failed"
    assert status(cfg, stale_s=1e9).set_index("run_id").loc[b, "state"] == "running"
    # a summarised run whose metrics.csv is gone is not done (it showed "done")
    (runs / a / "metrics.csv").unlink()
    assert status(cfg, stale_s=60).set_index("run_id").loc[a, "state"] == "incomplete"
    # finished, its tables not written yet (a packed run before unpack_run; it showed
    # "interrupted")
    (runs / a / "summary.json").unlink()
    os.utime(runs / a / "state" / "log.jsonl", (old, old))
    assert status(cfg, stale_s=60).set_index("run_id").loc[a, "state"] == "trained"


def test_a_run_that_failed_in_its_pack_is_failed_not_interrupted(tmp_path):
    """pack.enabled: a packed run's traceback is in its pack's job log (logs/train_pack/),
    never in a logs/train/ one (it showed "interrupted")."""
    cfg = _config(tmp_path, pack=True)
    ((pack_id, members),) = make_packs(cfg.specs, 2).items()
    for r in members:
        _quiet_log(tmp_path / "runs" / r)
    assert set(status(cfg, stale_s=60).state) == {"interrupted"}
    job_log = tmp_path / "logs" / "train_pack" / f"{pack_id}.log"
    job_log.parent.mkdir(parents=True)
    job_log.write_text("training a pack of 2 runs\nTraceback (most recent call last):\n")
    t = status(cfg, stale_s=60)
    assert t.state.tolist() == ["failed", "failed"] and t.step.tolist() == [40, 40]
    # the same logs, packing off: that pack's log is not these runs' job log
    assert set(status(_config(tmp_path), stale_s=60).state) == {"interrupted"}


def test_status_cli_names_a_bad_preset_in_one_line():
    with pytest.raises(SystemExit) as exc:
        main(["--preset", "nope", "--config", str(ROOT / "config.yaml")])  # the CLI's default base
    msg = str(exc.value)
    assert msg.startswith("mbc.status: config key 'preset' = 'nope'") and "\n" not in msg


def test_status_piped_into_a_closed_reader_ends_without_a_traceback(tmp_path):
    """`python -m mbc.status ... | head`: the reader is gone before the table is printed. The
    tool ends quietly with a closed pipe's status, not a BrokenPipeError traceback. The read
    end is closed before the tool starts, so its first line already meets a closed pipe."""
    import subprocess
    import sys

    from mbc.core.cli import CLOSED_PIPE_STATUS

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "mbc.status", "--preset", "smoke", "--outdir", str(tmp_path)],
            cwd=ROOT,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.returncode == CLOSED_PIPE_STATUS


def test_a_tool_ends_with_its_mains_status():
    from mbc.core.cli import run

    for returned, code in ((None, 0), (3, 3), ({"a": 1}, 0)):
        with pytest.raises(SystemExit) as exc:
            run(lambda r=returned: r)
        assert exc.value.code == code


def test_a_killed_jobs_fresh_log_is_interrupted_not_running(tmp_path):
    """A job killed moments ago leaves a log younger than --stale-s; where its lock names a
    process of this machine (host, boot, pid namespace) that has ended, the run is
    interrupted at once (it showed "running" until the log went stale). A live holder, one
    of another machine (a cluster node; a container sharing the host name), a lock written
    without the machine's tag, or a corrupt one leave the log's age to decide."""
    import socket

    from mbc.core.run_lock import machine_tag

    if not machine_tag():
        pytest.skip("/proc does not give the boot id and pid namespace here")
    cfg = _config(tmp_path)
    run = next(iter(cfg.specs))
    _quiet_log(tmp_path / "runs" / run)
    state = tmp_path / "runs" / run / "state"
    os.utime(state / "log.jsonl")  # written just now
    lock = state / "run.lock"
    no_such_pid = Path("/proc/sys/kernel/pid_max").read_text().strip()  # pids stay below it
    here = f"{socket.gethostname()}{machine_tag()}"

    def state_with(holder: str) -> str:
        lock.write_text(holder)
        return status(cfg, stale_s=60).set_index("run_id").loc[run, "state"]

    assert state_with(f"process {no_such_pid} on {here}\n") == "interrupted"
    assert state_with(f"process {os.getpid()} on {here}\n") == "running"
    assert state_with(f"process {no_such_pid} on another-node{machine_tag()}\n") == "running"
    other_boot = machine_tag().replace("(boot ", "(boot x")
    assert state_with(f"process {no_such_pid} on {socket.gethostname()}{other_boot}\n") == "running"
    assert state_with(f"process {no_such_pid} on {socket.gethostname()}\n") == "running"
    assert state_with("process 99999999999999999999 on x") == "running"  # no such pid
    lock.write_bytes(b"process 1 on \xff\xfe")  # not text
    assert status(cfg, stale_s=60).set_index("run_id").loc[run, "state"] == "running"
    lock.unlink()
    assert status(cfg, stale_s=60).set_index("run_id").loc[run, "state"] == "running"
