"""Faults a long cluster run meets: kill -9 mid-training, corrupt inputs, censored runs."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from helpers import last_resume_step

from mbc.config import load
from mbc.core.artifacts import (
    CorruptArtifactError,
    read_csv_checked,
    read_sidecar_sha256,
    sha256_file,
    write_csv_atomic,
)
from mbc.training.data import build_dataset
from mbc.training.train import train_run
from mbc.workflow.job_log import logged

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")


def descendants(pid: int) -> list[int]:
    """All descendant pids of `pid` (from /proc; no psutil needed)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_kill_9_mid_training_then_rerun_resumes_bitwise(tmp_path):
    out = tmp_path / "res"
    over = {
        "preset": "smoke",
        "outdir": str(out),
        "only": ["E1"],
        "defaults": {
            "train": {"max_steps": 1500, "early_stop_tau_factor": 0},
            "eval": {"resume_every": 100},
        },
    }
    # the live config: the run id must be the one the Snakemake run below trains
    cfg = load(yaml.safe_load((ROOT / "config.yaml").read_text()), over)
    run_id = cfg.run_ids("E1")[0]
    spec = cfg.specs[run_id]
    target = out / "runs" / run_id / "metrics.csv"
    cmd = [
        SNAKEMAKE,
        "--cores",
        "1",
        str(target),
        "--config",
        "preset=smoke",
        f"outdir={out}",
        'only=["E1"]',
        'defaults={"train": {"max_steps": 1500, "early_stop_tau_factor": 0}, "eval": {"resume_every": 100}}',
    ]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    # Early stopping is off: the smoke run would otherwise end near step 225.
    # Kill at a random step, chosen by progress rather than by wall time (a fast, idle
    # machine would otherwise finish before a random sleep ends): once the resume point at
    # step >= `at` is logged (at in 100..700 of 1500), plus a random fraction of a second.
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    at = rng.randrange(100, 800, 100)
    log_jsonl = out / "runs" / run_id / "state" / "log.jsonl"
    deadline = time.monotonic() + 300
    while last_resume_step(log_jsonl) < at and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    assert last_resume_step(log_jsonl) >= at, f"no resume point at step {at} (seed {seed})"
    time.sleep(rng.uniform(0.0, 0.2))
    victims = [p for p in descendants(proc.pid) if "train.py" in cmdline(p)]
    assert victims, f"no training process found (seed {seed})"
    for p in victims:
        os.kill(p, signal.SIGKILL)
    log, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, log[-2000:]
    assert not target.exists()
    # rerun the workflow: the job resumes from its last checkpoint
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    train_log = (out / "logs" / "train" / f"{run_id}.log").read_text()
    assert f"resuming {run_id} from step" in train_log, f"seed {seed}"
    torch.set_num_threads(1)
    ref = train_run(
        spec,
        build_dataset(spec.task, spec.seed),
        tmp_path / "ref",
        torch.device("cpu"),
        say=lambda s: None,
    )
    got = pd.read_csv(target).drop(columns=["wall_s"])
    pd.testing.assert_frame_equal(got, ref.drop(columns=["wall_s"]).reset_index(drop=True))


def test_truncated_table_is_detected_and_moved_aside(tmp_path):
    p = tmp_path / "t.csv"
    write_csv_atomic(p, pd.DataFrame({"a": range(100), "b": range(100)}))
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])  # killed mid-write by something else than us
    with pytest.raises(SystemExit), logged(tmp_path / "log"):  # one line, the job fails
        read_csv_checked(p, required=["a", "b"])
    assert not p.exists(), "a corrupt input is moved aside so the next run regenerates it"
    assert list(tmp_path.glob("t.csv.corrupt-*"))
    log = (tmp_path / "log").read_text()
    assert "Rerun the workflow to regenerate it" in log and "CorruptArtifactError" in log


def test_corrupt_snapshot_invalidates_the_run_for_retraining(tmp_path):
    from helpers import tiny_spec

    from mbc.training.snapshots import load_model, read_index

    spec = tiny_spec()
    run = tmp_path / "run"
    train_run(spec, build_dataset(spec.task, 0), run, torch.device("cpu"), say=lambda s: None)
    index = read_index(run)
    snap = run / index.path.iloc[-1]
    snap.write_bytes(snap.read_bytes()[:100])
    with pytest.raises(CorruptArtifactError, match="checksum") as exc:
        load_model(spec, run, index, int(index.step.iloc[-1]), "cpu")
    assert {p.name for p in exc.value.invalidate} == {"checkpoints.csv", "metrics.csv", "state"}


def test_atomic_write_leaves_old_file_when_interrupted(tmp_path, monkeypatch):
    p = tmp_path / "x.csv"
    write_csv_atomic(p, pd.DataFrame({"a": [1]}))

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        write_csv_atomic(p, pd.DataFrame({"a": [2, 3]}))
    assert pd.read_csv(p)["a"].tolist() == [1]
    # the table and its checksum (still the old table's), no temporary file left behind
    assert sorted(f.name for f in tmp_path.iterdir()) == ["x.csv", "x.csv.sha256"]
    assert read_sidecar_sha256(p) == sha256_file(p)


def test_same_config_and_seed_identical_across_fresh_processes(tmp_path):
    """Two fresh interpreters, same spec and seed: identical tables (CPU, same threads)."""
    code = (
        "import sys, torch; from helpers import tiny_spec; from mbc.training.data import build_dataset;"
        "from mbc.training.train import train_run; torch.set_num_threads(1); s = tiny_spec();"
        "train_run(s, build_dataset(s.task, s.seed), sys.argv[1], torch.device('cpu'),"
        " say=lambda m: None)"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests"))
    for name in ("a", "b"):
        subprocess.run([sys.executable, "-c", code, str(tmp_path / name)], check=True, env=env)
    a, b = (pd.read_csv(tmp_path / n / "metrics.csv").drop(columns=["wall_s"]) for n in "ab")
    pd.testing.assert_frame_equal(a, b)
    ca, cb = (pd.read_csv(tmp_path / n / "checkpoints.csv") for n in "ab")
    assert ca.sha256.tolist() == cb.sha256.tolist(), "snapshots are bitwise identical"
