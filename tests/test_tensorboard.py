"""config `tensorboard`: every training job, packed or not, writes its evaluations as
TensorBoard scalars under <outdir>/tensorboard/<run_id>/ (mbc.training.tensorboard_log).
The package is an optional extra: the test that reads the event files back is skipped,
saying so, where it is not installed (CI does not install it)."""

import dataclasses
import math

import pytest
import torch
from helpers import tiny_spec

from mbc.core.journal import read_journal
from mbc.training import tensorboard_log
from mbc.training.data import build_dataset
from mbc.training.train import train_pack, train_run

CPU = torch.device("cpu")
QUIET = {"say": lambda m: None}


def test_scalars_of_one_evaluation_row():
    spec = tiny_spec()
    row = {
        "step": 40,
        "candidate_loss": spec.task.log_k / 2,
        "candidate_accuracy": 0.5,
        "first_target_loss": 1.0,
        "delta_z": None,
        "delta_z_first": math.nan,
        "grad_norm": 2.0,
        "train_loss": 1.5,
    }
    s = tensorboard_log.scalars(row, spec)
    assert s["L_cand_over_log_K"] == pytest.approx(0.5) and s["lr"] == spec.train.lr
    assert "delta_z" not in s and "delta_z_first" not in s  # no value yet: no point
    assert "lr" not in tensorboard_log.scalars({**row, "step": 0}, spec)


def test_switch_off_or_without_the_package(tmp_path, monkeypatch):
    said = []
    monkeypatch.delenv(tensorboard_log.ENV, raising=False)
    assert (
        tensorboard_log.open_run(tiny_spec(), tmp_path / "runs" / "r", 0, [], said.append) is None
    )
    monkeypatch.setenv(tensorboard_log.ENV, "1")
    monkeypatch.setattr(tensorboard_log, "available", lambda: False)
    monkeypatch.setattr(tensorboard_log, "_said", False)
    for _ in range(2):
        assert tensorboard_log.open_run(tiny_spec(), tmp_path, 0, [], said.append) is None
    assert said == [tensorboard_log.missing_line()]  # one line, not one per run
    assert 'pip install -e ".[tensorboard]"' in said[0]


def _events(log_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_event_files_read_back_unpacked_packed_and_switched_on_mid_run(tmp_path, monkeypatch):
    if not tensorboard_log.available():
        pytest.skip(
            'the optional tensorboard package is not installed (pip install -e ".[tensorboard]")'
        )
    spec = tiny_spec()
    runs, board = tmp_path / "runs", tmp_path / "tensorboard"
    # unpacked: off for the first 40 steps, then switched on and resumed
    monkeypatch.setenv(tensorboard_log.ENV, "0")
    train_run(
        spec, build_dataset(spec.task, spec.seed), runs / spec.run_id, CPU, stop_after=40, **QUIET
    )
    assert not board.exists()
    monkeypatch.setenv(tensorboard_log.ENV, "1")
    # resumed at 40: killed 50 steps later, past its resume point at 80, then to the end
    for stop in (50, None):
        train_run(
            spec,
            build_dataset(spec.task, spec.seed),
            runs / spec.run_id,
            CPU,
            stop_after=stop,
            **QUIET,
        )
    # packed: two runs of one shape in one job
    pack = [dataclasses.replace(spec, seed=s) for s in (1, 2)]
    train_pack(
        pack,
        [build_dataset(s.task, s.seed) for s in pack],
        [runs / s.run_id for s in pack],
        CPU,
        **QUIET,
    )
    for s in [spec, *pack]:
        rows = [
            r for r in read_journal(runs / s.run_id / "state" / "log.jsonl") if "event" not in r
        ]
        ev = _events(board / s.run_id)
        assert {
            "L_cand",
            "L_cand_over_log_K",
            "accuracy",
            "first_target_loss",
            "delta_z",
            "grad_norm",
            "lr",
        } <= set(ev)
        # every evaluation once, from step 0 (the switch came on at step 40 for `spec`; what
        # was evaluated past step 80 before the kill is purged and evaluated again)
        assert sorted(st for st, _ in ev["L_cand"]) == sorted(r["step"] for r in rows)
        got = dict(ev["L_cand"])
        for r in rows:
            assert got[r["step"]] == pytest.approx(r["candidate_loss"], rel=1e-6)
        assert dict(ev["lr"])[spec.train.max_steps] == pytest.approx(spec.train.lr)
