"""measured/<preset>/: the committed reports match the config's run ids (or say STALE), and
PROVENANCE comes from what the runs' logs recorded."""

import json
from pathlib import Path

import pandas as pd
import torch
from helpers import tiny_spec

from mbc import config as mbc_config
from mbc.measured import check, provenance, read_logs
from mbc.training.data import build_dataset
from mbc.training.train import train_run

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "config.yaml")  # the live config: measured/ must match its run ids


def test_committed_reports_have_the_configs_run_ids_or_say_stale():
    measured = ROOT / "measured"
    if measured.exists():
        assert check(measured, CONFIG) == []
        for d in measured.iterdir():
            if (d / "STALE").exists():  # the README says so
                assert f"measured/{d.name}/STALE" in (ROOT / "README.md").read_text()


def test_a_report_with_other_run_ids_needs_a_stale_file(tmp_path):
    ids = sorted(mbc_config.load(mbc_config.read_yaml(CONFIG), {"preset": "smoke"}).specs)
    d = tmp_path / "smoke"
    d.mkdir()
    pd.DataFrame({"run_id": ids}).to_csv(d / "tau.csv", index=False)
    assert check(tmp_path, CONFIG) == []
    pd.DataFrame({"run_id": ids[1:] + ["E1-K3-old-id"]}).to_csv(d / "tau.csv", index=False)
    (problem,) = check(tmp_path, CONFIG)
    assert "1 run ids the config no longer gives and 1 it gives" in problem and "STALE" in problem
    (d / "STALE").write_text("defaults changed: precision bf16\n")
    assert check(tmp_path, CONFIG) == []


def _log(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_provenance_reads_the_starts_and_ends_of_the_runs(tmp_path):
    start = {
        "event": "start",
        "commit": "abc123",
        "dirty": False,
        "cpu": "Xeon",
        "threads": 1,
        "torch": "2.13.0",
        "host": "vm",
    }
    _log(
        tmp_path / "runs" / "a" / "state" / "log.jsonl",
        [
            {**start, "step": 0, "time": "2026-12-04T10:00:00Z"},
            {"event": "done", "step": 900, "time": "2026-12-04T11:00:00Z"},
        ],
    )
    _log(
        tmp_path / "runs" / "b" / "state" / "log.jsonl",
        [
            {**start, "step": 0, "time": "2026-12-04T10:30:00Z"},
            {
                **start,
                "step": 500,
                "time": "2026-12-04T12:00:00Z",
                "commit": "def456",
                "device": "cuda (NVIDIA H200)",
            },
            {"event": "done", "step": 900, "time": "2026-12-04T13:30:00Z"},
        ],
    )
    lines = provenance(read_logs(tmp_path, ["a", "b"]))
    text = "\n".join(lines)
    assert "commit: abc123 (2 training start(s))" in text
    assert "commit: def456 (1 training start(s))" in text
    assert "started: 2026-12-04T10:00:00Z" in text and "ended: 2026-12-04T13:30:00Z" in text
    assert "wall time: 3.50 h" in text
    assert "resumed: yes (1 of 2 runs" in text
    assert "CPU: Xeon (3)" in text
    # a start from before the device was logged names its torch build instead
    assert "device: not logged (torch 2.13.0) (2), cuda (NVIDIA H200) (1)" in text


def test_training_logs_its_code_and_machine_at_each_start(tmp_path):
    spec = tiny_spec()
    run_dir = tmp_path / "runs" / "r1"
    train_run(
        spec, build_dataset(spec.task, spec.seed), run_dir, torch.device("cpu"), say=lambda m: None
    )
    rows = [json.loads(x) for x in (run_dir / "state" / "log.jsonl").read_text().splitlines()]
    (start,) = [r for r in rows if r.get("event") == "start"]
    assert start["step"] == 0 and {"commit", "dirty", "cpu", "threads", "time"} <= set(start)
    assert rows[-1]["event"] == "done" and "time" in rows[-1]
    text = "\n".join(provenance(read_logs(tmp_path, ["r1"])))
    assert "resumed: no (0 of 1" in text and "record no start" not in text
    assert f"threads per training job: {start['threads']} (1)" in text
    assert start["device"] == "cpu" and "device: cpu (1)" in text


def test_a_launchers_commit_wins_over_a_copied_git(monkeypatch):
    """A tree copied to a device may carry a stale .git; the launcher's MBC_CODE_COMMIT is
    what the logs then record (whether the copy was clean is unknown: None)."""
    from mbc.core.provenance import code_version

    code_version.cache_clear()
    monkeypatch.setenv("MBC_CODE_COMMIT", "f94c3b6")
    try:
        assert code_version() == {"commit": "f94c3b6", "dirty": None}
    finally:
        code_version.cache_clear()
    monkeypatch.delenv("MBC_CODE_COMMIT")
    assert code_version()["commit"] != "f94c3b6"
    code_version.cache_clear()


def test_steps_by_experiment_count_the_kept_steps_by_the_device_that_trained_them(tmp_path):
    """A run resumed on another device: each start trains from its step to the next start's
    (steps past the resume point that a kill lost count nowhere); a run two experiments list
    counts in both; a log with no start counts as "not logged"."""
    from mbc.measured import steps_by_experiment

    _log(
        tmp_path / "runs" / "a" / "state" / "log.jsonl",
        [
            {"event": "start", "step": 0, "device": "cpu"},
            {"event": "start", "step": 2500, "device": "cuda (NVIDIA H200)"},
            {"event": "start", "step": 5000, "torch": "2.13.0+cpu"},
            {"event": "done", "step": 6250},
        ],
    )
    _log(tmp_path / "runs" / "b" / "state" / "log.jsonl", [{"event": "done", "step": 800}])
    tau = pd.DataFrame(
        {
            "run_id": ["a", "b", "a"],
            "experiment": ["E1", "E1", "E15_E1"],
            "steps": [6250, 800, 6250],
        }
    )
    assert steps_by_experiment(read_logs(tmp_path, ["a", "b"]), tau) == [
        "steps by device: cpu 2,500; cuda (NVIDIA H200) 2,500; "
        "not logged (torch 2.13.0+cpu) 1,250; not logged 800",  # each run once
        "steps E1: 7,050 in 2 run(s) (cpu 2,500; cuda (NVIDIA H200) 2,500; "
        "not logged (torch 2.13.0+cpu) 1,250; not logged 800)",
        "steps E15_E1: 6,250 in 1 run(s) (cpu 2,500; cuda (NVIDIA H200) 2,500; "
        "not logged (torch 2.13.0+cpu) 1,250)",
    ]


def test_steps_before_a_logs_first_start_count_as_not_logged():
    """A log begun mid-run (its first start at a resume point): the steps before it are
    counted, as not logged, so each experiment's steps add up to its runs' steps."""
    from mbc.measured import _steps_by_device

    rows = [{"event": "start", "step": 500, "device": "cpu"}, {"event": "done", "step": 800}]
    assert _steps_by_device(rows, 800) == {"not logged": 500, "cpu": 300}


def test_training_time_counts_each_job_once_by_its_active_time(tmp_path):
    """Each training job once, as the longest session of its runs (a pack's runs share one
    clock), by the device it ran on: a run's sessions split at its starts (the clock goes
    on from the resume point's reading); a start with a job key groups by it, an older one
    by host, the config's pack and a start within seconds; a run added to a pack's later
    job is a job of its own; a log without a clock adds nothing."""
    from mbc.measured import training_time

    def start(t, step=0, device="cpu", **more):
        return {"event": "start", "step": step, "time": t, "host": "vm", "device": device, **more}

    h200 = "cuda (NVIDIA H200)"
    logs = {
        # a and b packed, one job at 10:00 (no job key: an older trainer); a stopped early
        "a": [start("2026-12-04T10:00:00Z"), {"step": 50, "wall_s": 600.0}],
        "b": [
            start("2026-12-04T10:00:01Z"),
            {"step": 100, "wall_s": 900.0},
            {"event": "resume", "step": 100, "wall_s": 900.0},
            # resumed alone in a later job: its clock goes on from 900 s
            start("2026-12-04T12:00:00Z", 100),
            {"step": 200, "wall_s": 2700.0},
        ],
        # in no pack; resumed on a GPU by a trainer that logs its job
        "c": [
            start("2026-12-04T10:00:00Z"),
            {"step": 100, "wall_s": 1000.0},
            start("2026-12-05T09:00:00Z", 100, h200, job="gpu:7:1"),
            {"step": 200, "wall_s": 1800.0},
        ],
        # two runs of one GPU pack (one job key), 500 s and 700 s on its clock
        "d1": [start("2026-12-05T09:00:00Z", 0, h200, job="gpu:8:2"), {"step": 9, "wall_s": 500.0}],
        "d2": [start("2026-12-05T09:00:00Z", 0, h200, job="gpu:8:2"), {"step": 9, "wall_s": 700.0}],
        "e": [{"event": "done", "step": 9}],
    }
    (line,) = training_time(logs, {"pack-0": ["a", "b"], "pack-1": ["other"]})
    # cpu: 900 (a+b) + 1800 (b alone) + 1000 (c); cuda: 800 (c) + 700 (d1+d2)
    assert line.startswith(
        "training job time: 1.44 h in 5 training job(s) (cpu 1.03 h; cuda (NVIDIA H200) 0.42 h)"
    ), line
    assert training_time({"e": logs["e"]}, {}) == []
