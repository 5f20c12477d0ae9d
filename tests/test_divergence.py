"""Divergence is a state (docs/method.md#divergence): a run whose loss leaves every trainable
range stops at once, packed or not, and is recorded as diverged in its log, summary.json,
tau.csv and mbc.status; the analysis leaves it out (config `diverged: exclude`) and says so,
never counting it as censored at its budget; figures mark it; every JSON written is strict."""

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import fixture_config, tiny_spec
from test_figures import NAMES, _all_tables, _render_all, _run, _write
from test_statistics import BOOT, no_rows, tau_rows

from mbc.analysis.config_sections import Fit, Scorecard, Statistics
from mbc.analysis.fit_tables import fit_table
from mbc.analysis.scorecard import scorecard
from mbc.analysis.stats import compute_statistics
from mbc.core.artifacts import write_json_atomic
from mbc.core.config_loader import Run
from mbc.core.journal import finished, logged_divergence, read_journal
from mbc.diagnostics.config_sections import Summary
from mbc.paper import figures
from mbc.runs_pipeline import make_tau_table, summarize
from mbc.status import run_state
from mbc.training.data import build_dataset
from mbc.training.record import RunRecord, RunView
from mbc.training.train import train_pack, train_run

CPU = torch.device("cpu")
QUIET = {"say": lambda m: None}
DIAG = Summary.from_raw(fixture_config()["diagnostics"])


def _no_nan(token):
    raise ValueError(f"not strict JSON: {token}")


def _lr(spec, lr):
    return dataclasses.replace(spec, train=dataclasses.replace(spec.train, lr=lr))


def _check_diverged(spec, run_dir: Path, tmp_path: Path) -> int:
    """The run's log, summary.json, tau.csv row and status all say diverged, at one step."""
    rows = read_journal(run_dir / "state" / "log.jsonl")
    step = logged_divergence(rows)
    assert step is not None and finished(rows), rows[-3:]
    assert step < spec.train.max_steps  # stopped, not trained to its budget
    assert pd.read_csv(run_dir / "metrics.csv").step.max() == step
    summarize(spec, run_dir / "metrics.csv", run_dir / "summary.json", DIAG)
    s = json.loads((run_dir / "summary.json").read_text(), parse_constant=_no_nan)
    assert s["status"] == "diverged" and s["diverged"] and s["diverged_step"] == step
    assert s["tau"] is None and not s["censored"] and s["steps"] == step
    make_tau_table([Run("E6", spec)], [run_dir / "summary.json"], tmp_path / "tau.csv")
    row = pd.read_csv(tmp_path / "tau.csv").iloc[0]
    assert row.status == "diverged" and row.diverged and row.diverged_step == step
    assert not row.censored and pd.isna(row.tau)
    st = run_state(str(run_dir.parent.parent), spec.run_id, spec, now=0.0, stale_s=1.0)
    assert st["state"] == "diverged" and st["step"] == step
    return step


def test_a_diverging_run_stops_and_is_recorded_unpacked_and_packed(tmp_path):
    base = tiny_spec()
    bad = _lr(base, 1.0e30)
    ds = build_dataset(bad.task, bad.seed)
    alone = tmp_path / "alone" / "runs" / bad.run_id
    train_run(bad, ds, alone, CPU, **QUIET)
    step = _check_diverged(bad, alone, tmp_path / "a")
    # finished: a rerun does not train it again
    log = (alone / "state" / "log.jsonl").read_text()
    train_run(bad, ds, alone, CPU, **QUIET)
    assert (alone / "state" / "log.jsonl").read_text() == log

    # packed beside a healthy run: it leaves the pack as a finished run does, at the same
    # step; the healthy run trains on to its budget as it would alone
    dirs = [tmp_path / "pack" / "runs" / s.run_id for s in (base, bad)]
    assert train_pack([base, bad], [ds, ds], dirs, CPU, **QUIET) == [True, True]
    assert _check_diverged(bad, dirs[1], tmp_path / "p") == step
    train_run(base, ds, tmp_path / "healthy", CPU, **QUIET)
    a = pd.read_csv(tmp_path / "healthy" / "metrics.csv").drop(columns="wall_s")
    b = pd.read_csv(dirs[0] / "metrics.csv").drop(columns="wall_s")
    assert b.step.max() == base.train.max_steps
    pd.testing.assert_frame_equal(a, b, check_exact=False, atol=1e-4, rtol=0)
    assert train_pack([base, bad], [ds, ds], dirs, CPU, **QUIET) == [False, False]


class _View(RunView):
    """A RunView whose weights are fine: only the training loss goes bad (the training-log
    measurements: the protocol's NaN)."""

    def keep(self):
        return {"w": torch.zeros(1)}

    def grad_norm(self):
        return 1.0

    def evaluate(self, weights=None):
        m = {"loss": 3.0, "candidate_loss": 1.0, "delta_z": 0.0}
        return [dict(m) for _ in (weights if weights is not None else [None])]

    def resume_state(self):
        return {"model": {}, "optimizer": {}}


@pytest.mark.parametrize("bad_loss", [math.inf, math.nan, 1.0e6])
def test_divergence_between_evaluations_stops_within_dense_every_steps(tmp_path, bad_loss):
    spec = tiny_spec()  # evaluations every 20 steps, the check every dense_every = 10
    rec = RunRecord(spec, tmp_path, say=lambda m: None)
    rec.resume()
    view = _View()
    rec.start(view)
    first_bad, stopped = 23, None
    for step in range(1, spec.train.max_steps + 1):
        loss = torch.tensor(bad_loss if step >= first_bad else 1.0)
        if rec.after_step(step, loss, view):
            stopped = step
            break
    assert stopped is not None and first_bad <= stopped <= first_bad + spec.eval.dense_every
    rows = read_journal(tmp_path / "state" / "log.jsonl")
    assert logged_divergence(rows) == stopped and finished(rows)
    assert rec.diverged == stopped


def test_a_loss_under_the_bound_is_not_divergence(tmp_path):
    spec = tiny_spec()
    rec = RunRecord(spec, tmp_path, say=lambda m: None)
    rec.resume()
    rec.start(_View())
    for step in range(1, spec.train.max_steps + 1):  # 50 x log(40) < 100 x log(40)
        done = rec.after_step(step, torch.tensor(50 * math.log(40)), _View())
    assert done and rec.diverged is None
    assert logged_divergence(read_journal(tmp_path / "state" / "log.jsonl")) is None


def _e6(with_diverged: bool) -> pd.DataFrame:
    """The issue's E6 grid: tau falls with lr (ratio 0.5); lr 1e30 diverged at step 5000."""
    lrs, taus = [1e-3, 1e-3, 2e-3, 2e-3], [1000, 1000, 500, 500]
    cols = dict(
        experiment=["E6"] * 4,
        lr=lrs,
        tau=taus,
        steps=[5000] * 4,
        k=[20] * 4,
        censored=[False] * 4,
        diverged=[False] * 4,
        status=["crossed"] * 4,
    )
    if with_diverged:
        for c, v in dict(
            experiment="E6",
            lr=1e30,
            tau=np.nan,
            steps=5000,
            k=20,
            censored=False,
            diverged=True,
            status="diverged",
        ).items():
            cols[c] = [*cols[c], v]
    return tau_rows(**cols)


def test_a_diverged_run_is_left_out_and_does_not_flip_the_lr_row():
    raw = fixture_config()
    row = [r for r in Scorecard.from_raw(raw["scorecard"]).rows if r.ours == "lr_tau_ratio"]
    declared = Statistics.from_raw(raw["statistics"])
    out = {}
    for with_div in (False, True):
        tau = _e6(with_div)
        stats = compute_statistics(tau, *no_rows(), BOOT, declared, "exclude")
        s = stats.set_index("name").loc["lr_tau_ratio"]
        out[with_div] = (s.value, scorecard(row, stats).iloc[0].ours_agreement, s.n_diverged)
        fits = fit_table(
            [Fit("tau_vs_lr", "lr", ("E6",))], tau, pd.DataFrame(), BOOT, diverged="exclude"
        )
        assert fits.iloc[0].n == 4 and fits.iloc[0].n_censored == 0
        assert fits.iloc[0].n_diverged == int(with_div)
    assert out[False][:2] == (pytest.approx(0.5), "disagree")
    assert out[True][:2] == out[False][:2], out  # not 5000 / 1000 = 5.0, "agree"
    assert out[True][2] == 1
    s = compute_statistics(_e6(True), *no_rows(), BOOT, declared, "exclude")
    assert "1 diverged run(s) left out" in s.set_index("name").loc["lr_tau_ratio", "what"]
    with pytest.raises(RuntimeError, match="diverged: fail"):
        compute_statistics(_e6(True), *no_rows(), BOOT, declared, "fail")


def test_json_written_is_strict(tmp_path):
    write_json_atomic(tmp_path / "a.json", {"x": math.nan, "y": [math.inf, 1.0], "z": None})
    got = json.loads((tmp_path / "a.json").read_text(), parse_constant=_no_nan)
    assert got == {"x": None, "y": [None, 1.0], "z": None}


def test_figures_mark_diverged_runs(tmp_path):
    tables = _all_tables()
    extra = [
        _run(
            "E6",
            "e6_lr1e30",
            lr=1e30,
            tau=None,
            budget=40,
            censored=False,
            diverged=True,
            status="diverged",
            diverged_step=40,
            plateau_height=None,
            height_over_log_k=None,
            final_candidate_loss=None,
            final_candidate_accuracy=None,
        ),
        _run(
            "E1",
            "e1_k7_div",
            k=7,
            tau=None,
            budget=400,
            censored=False,
            diverged=True,
            status="diverged",
            diverged_step=400,
        ),
    ]
    tau = pd.concat([tables["tau"], pd.DataFrame(extra)], ignore_index=True)
    tau["diverged"] = tau["run_id"].isin(["e6_lr1e30", "e1_k7_div"])
    steps = np.array([0, 50, 100, 200, 300, 400])
    curve = pd.DataFrame(
        dict(
            run_id="e1_k7_div",
            step=steps,
            examples_seen=steps * 128,
            train_loss=[np.nan, 3.0, 3.0, 3.0, 3.0, np.nan],
            loss=3.0,
            first_target_loss=3.0,
            candidate_loss=[3.0, 3.0, 3.0, 3.0, 3.0, np.nan],
            candidate_accuracy=0.05,
            shuffled_loss=3.0,
            delta_z=0.0,
            grad_norm=1.0,
            wall_s=1.0,
        )
    )
    tables["tau"] = tau
    tables["metrics"] = pd.concat([tables["metrics"], curve], ignore_index=True)
    texts = _render_all(_write(tables, tmp_path / "tables"), tmp_path / "out")
    assert all((tmp_path / "out" / f"{n}.png").exists() for n in NAMES)
    for fig in ("noise", "loss_curves"):
        assert figures.common.DIVERGED_LABEL in texts[fig], (fig, texts[fig])
        assert texts[fig].count(figures.common.DIVERGED_LABEL) == 1
