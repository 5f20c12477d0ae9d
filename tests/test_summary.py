import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import tiny_spec

from mbc.diagnostics.config_sections import Lead, PlateauSensitivity, Summary
from mbc.diagnostics.plateau_sensitivity import plateau_sensitivity
from mbc.diagnostics.series import plateau_height
from mbc.diagnostics.summary import author_statistics, summarize_run

DIAG_RAW = {
    "plateau": {"start_fraction": 0.2, "onset_fraction": 0.9, "end_at_z_onset": True},
    "lead": {"delta_z_onset": 0.1, "loss_onset_fraction": 0.9},
    "first_target": {"threshold": 0.5},
    "transition": {"start_fraction": 0.95, "end_fraction": 0.05},
}
DIAG = Summary.from_raw(DIAG_RAW)  # as config.load types config `diagnostics`


def metrics(lcand, dz):
    steps = np.arange(len(lcand)) * 10
    return pd.DataFrame(
        {
            "step": steps,
            "candidate_loss": lcand,
            "delta_z": dz,
            "candidate_accuracy": np.zeros(len(lcand)),
            "first_target_loss": lcand,
            "delta_z_first": dz,
        }
    )


def test_tau_strictly_below_threshold_and_censoring():
    spec = tiny_spec()  # K = 3, threshold 0.5
    lk = math.log(3)
    lc = np.array([lk, lk, 0.5 * lk, 0.49 * lk, 0.1])
    s = summarize_run(spec, metrics(lc, np.zeros(5)), DIAG)
    assert s["tau"] == 30 and not s["censored"]  # 0.5 log K itself does not count
    s = summarize_run(spec, metrics(np.full(5, lk), np.zeros(5)), DIAG)
    assert s["tau"] is None and s["censored"] and s["steps"] == 40
    assert s["height_over_log_k"] == 1.0


def test_plateau_height_window_ends_at_the_first_sign_of_transition():
    lk = math.log(5)
    # plateau at log K, a bump while z starts being used, then the drop
    lc = np.array([lk] * 10 + [1.4 * lk] * 3 + [0.2 * lk] * 3)
    dz = np.array([0.0] * 10 + [0.5] * 6)
    steps = np.arange(16) * 10
    assert plateau_height(steps, lc, lk, start_fraction=0.2, onset_fraction=0.9, z_onset=100) == lk
    # ended by the loss onset (130) alone: the window [26, 130) holds the bump, a time
    # mean over steps 30..120 (trapezoid): 60 steps at 1.0, 10 rising to 1.4, 20 at 1.4
    with_bump = plateau_height(steps, lc, lk, start_fraction=0.2, onset_fraction=0.9)
    assert with_bump / lk == pytest.approx((60 * 1.0 + 10 * 1.2 + 20 * 1.4) / 90)
    s = summarize_run(tiny_spec(k=5), metrics(lc, dz), DIAG)
    assert s["height_over_log_k"] == 1.0
    assert s["delta_z_onset"] == 100 and s["loss_onset"] == 130
    assert s["lead"] == 30 and s["lead_fraction"] == 30 / 130


def _sensitivity_inputs():
    """E1 run "a" (K = 5): plateau at log K to step 100, then z starts to be read (delta_z
    0.02 at step 100, 0.05 at 110, 0.5 from 120) while L_cand rises to 1.4 log K, and the
    loss falls at 130. A linear run "lin" is listed but must be left out."""
    lk = math.log(5)
    lc = np.array([lk] * 10 + [1.4 * lk] * 3 + [0.2 * lk] * 3)
    dz = np.array([0.0] * 10 + [0.02, 0.05] + [0.5] * 4)
    m = metrics(lc, dz)
    m.insert(0, "run_id", "a")
    lin = m.assign(run_id="lin")
    tau = pd.DataFrame(
        [
            {"experiment": "E1", "run_id": "a", "model": "transformer", "k": 5, "d": 50, "seed": 0},
            {"experiment": "E1", "run_id": "lin", "model": "linear", "k": 5, "d": 50, "seed": 0},
            {"experiment": "E5", "run_id": "a", "model": "transformer", "k": 5, "d": 50, "seed": 0},
        ]
    )
    return tau, pd.concat([m, lin]), lc, dz


def test_plateau_sensitivity_moves_only_the_window_end():
    tau, m, lc, dz = _sensitivity_inputs()
    cfg = PlateauSensitivity(("E1",), (0.3, 0.01), (0.9, 1.1))
    t = plateau_sensitivity(cfg, DIAG, tau, m).set_index("window_end")
    # ordered thresholds, the config's own 0.1 added, then the loss onset alone
    assert list(t.index) == ["delta_z > 0.01", "delta_z > 0.1", "delta_z > 0.3", "loss onset only"]
    assert set(t.run_id) == {"a"} and set(t.experiment) == {"E1"}
    assert t.loc["delta_z > 0.01", "window_stop"] == 100
    assert t.loc["delta_z > 0.01", "height_over_log_k"] == pytest.approx(1.0, abs=1e-12)
    # 0.1 and 0.3 both end at step 120 (0.05 < threshold): the step-110 bump (1.4) enters
    assert t.loc["delta_z > 0.1", "window_stop"] == 120
    h = t.loc["delta_z > 0.1", "height_over_log_k"]
    # time mean over steps 30..110 (trapezoid): 60 steps at 1.0, 10 rising to 1.4, 10 at 1.4
    assert h == pytest.approx((60 * 1.0 + 10 * 1.2 + 10 * 1.4) / 80)
    assert h > 1.0
    # the loss onset (L_cand < 0.9 log K) is at 130: the whole bump enters
    assert t.loc["loss onset only", "window_stop"] == 130
    assert t.loc["loss onset only", "height_over_log_k"] == pytest.approx(
        (60 * 1.0 + 10 * 1.2 + 20 * 1.4) / 90
    )
    # the primary row reproduces the run summary exactly
    assert list(t.index[t.primary]) == ["delta_z > 0.1"]
    s = summarize_run(tiny_spec(k=5), m[m.run_id == "a"].drop(columns="run_id"), DIAG)
    assert t.loc["delta_z > 0.1", "height_over_log_k"] == s["height_over_log_k"]
    assert t["in_band"].tolist() == [0.9 <= v <= 1.1 for v in t["height_over_log_k"]]
    assert t.loc["delta_z > 0.01", "in_band"] and not t.loc["loss onset only", "in_band"]


def test_plateau_sensitivity_without_z_onset_marks_the_loss_onset_primary():
    tau, m, _, _ = _sensitivity_inputs()
    diag = Summary.from_raw(DIAG_RAW | {"plateau": DIAG_RAW["plateau"] | {"end_at_z_onset": False}})
    cfg = PlateauSensitivity(("E1",), (0.01,), (0.9, 1.1))
    t = plateau_sensitivity(cfg, diag, tau, m)
    assert t.loc[t.primary, "window_end"].tolist() == ["loss onset only"]


def test_plateau_sensitivity_names_a_run_without_metrics():
    tau, m, _, _ = _sensitivity_inputs()
    cfg = PlateauSensitivity(("E1",), (0.01,), (0.9, 1.1))
    with pytest.raises(ValueError, match="no rows for run a"):
        plateau_sensitivity(cfg, DIAG, tau, m[m.run_id != "a"])


def test_plateau_height_is_a_time_mean_unmoved_by_dense_evaluations():
    """Evaluations packed every 5 steps near the window's end (eval.dense_every) must not
    outweigh the coarse ones: the height is the mean over steps, not over rows."""
    lk = math.log(4)
    coarse = np.arange(0, 201, 50)  # 0..200 every 50
    dense = np.arange(205, 250, 5)  # 205..245
    steps = np.concatenate([coarse, dense, [250, 300]])
    lc = np.where(steps <= 200, lk, 1.2 * lk)  # 1.2 log K on (200, 300]
    lc[-1] = 0.1 * lk  # the loss falls at 300
    h = plateau_height(steps, lc, lk, start_fraction=0.0, onset_fraction=0.9)
    # window [1, 300): rows 50..250; curve: 1.0 on [50, 200], linear to 1.2 at 205, then 1.2
    assert h / lk == pytest.approx((150 * 1.0 + 5 * 1.1 + 45 * 1.2) / 200)
    # the row mean would have counted the 10 rows at 1.2 against 4 at 1.0
    assert lc[(steps >= 1) & (steps < 300)].mean() / lk > h / lk + 0.05


def test_author_statistics_first_target_tau_window_and_lead():
    """L1 (first-target loss) and L_cand on a planted run with known crossings."""
    lk = math.log(10)
    steps = np.arange(0, 1001, 50)
    # L_cand: log K to step 400, 0.96 at 450, 0.5 at 500, 0.2 at 550, 0.04 from 600
    lc = np.full(steps.size, lk)
    lc[steps == 450], lc[steps == 500], lc[steps == 550] = 0.96 * lk, 0.5 * lk, 0.2 * lk
    lc[steps >= 600] = 0.04 * lk
    # L1: log 36 until 300, 0.85 log K at 300 (onset), 0.45 log K from 500 (first-target tau)
    l1 = np.full(steps.size, math.log(36))
    l1[(steps >= 300) & (steps < 500)] = 0.85 * lk
    l1[steps >= 500] = 0.45 * lk
    dz1 = np.where(steps >= 150, 0.2, 0.0)  # first-target delta_z onset at 150
    m = pd.DataFrame(
        {"step": steps, "candidate_loss": lc, "first_target_loss": l1, "delta_z_first": dz1}
    )
    diag = DIAG
    a = author_statistics(steps, m, lk, diag)
    assert a["first_target_tau"] == 500 and not a["first_target_censored"]
    assert (a["transition_start"], a["transition_end"], a["transition_duration"]) == (450, 600, 150)
    assert a["first_target_loss_onset"] == 300 and a["delta_z_first_onset"] == 150
    assert a["lead_first"] == 150 and a["lead_fraction_first"] == pytest.approx(0.5)
    # a run that never reaches 0.05 log K has no window; one never above 0.95 opens at step 0
    never = author_statistics(steps, m.assign(candidate_loss=0.5 * lk), lk, diag)
    assert never["transition_censored"] and never["transition_duration"] is None
    # below the start mark since step 0 (no eval above it): inside the window for 1000 steps
    assert never["transition_bound"] == 1000
    # dropped below 0.95 log K after step 600 but never below 0.05: at least 1000 - 600
    half = author_statistics(
        steps, m.assign(candidate_loss=np.where(steps <= 600, lk, 0.5 * lk)), lk, diag
    )
    assert half["transition_bound"] == 400 and half["transition_duration"] is None
    # still on the plateau at the end: the window has not opened, no bound
    flat = author_statistics(steps, m.assign(candidate_loss=lk), lk, diag)
    assert flat["transition_bound"] is None and a["transition_bound"] is None
    low = author_statistics(
        steps, m.assign(candidate_loss=np.where(steps < 600, 0.9, 0.04) * lk), lk, diag
    )
    assert (low["transition_start"], low["transition_end"]) == (0, 600)


def test_dip_duration_is_log_k_dip_to_half_a_nat():
    """E11's duration (the author's): first L_cand < log K -> first L_cand < 0.5 nats, an
    absolute threshold, on a planted series whose steps are known."""
    from mbc.diagnostics.series import dip_duration

    lk = math.log(20)  # 3.0 nats
    steps = np.arange(0, 1001, 50)
    # above log K to step 200, just below from 250, 0.6 nats at 700 (< 0.5 log K = 1.5 but
    # not < 0.5 nats), 0.4 nats from 800
    lcand = np.select([steps <= 200, steps < 700, steps < 800], [lk + 0.1, lk - 0.01, 0.6], 0.4)
    d = dip_duration(steps, lcand, lk, start_fraction=1.0, end_nats=0.5)
    assert (d["dip_start"], d["dip_end"], d["dip_duration"]) == (250, 800, 550)
    assert not d["dip_censored"] and d["dip_bound"] is None
    # never below 0.5 nats: censored, bound = steps since the dip
    cut = dip_duration(steps, np.minimum(lcand, lk - 0.01).clip(0.6), lk, 1.0, 0.5)
    assert cut["dip_censored"] and cut["dip_duration"] is None
    assert cut["dip_start"] == 0 and cut["dip_bound"] == 1000
    # never dipped: no bound
    flat = dip_duration(steps, np.full(steps.size, lk), lk, 1.0, 0.5)
    assert flat["dip_start"] is None and flat["dip_bound"] is None and flat["dip_censored"]
    # the author's statistic reaches tau.csv through author_statistics
    m = pd.DataFrame({"step": steps, "candidate_loss": lcand, "first_target_loss": lcand})
    dip = Summary.from_raw(DIAG_RAW | {"dip": {"start_fraction": 1.0, "end_nats": 0.5}})
    a = author_statistics(steps, m, lk, dip)
    assert a["dip_duration"] == 550


def test_logged_lead_on_a_planted_running_mean_series():
    """The author's lead from the training log: onsets read on the windows' running-mean L1
    and on (last batch's shuffled L1 - running mean), by hand."""
    from mbc.diagnostics.logged import logged_lead

    lk = math.log(10)
    lead_cfg = Lead(delta_z_onset=0.1, loss_onset_fraction=0.9)
    steps = np.arange(50, 1001, 50)
    # running mean: log 36 until 600, then 0.85 log K from 650 (< 0.9 log K: onset 650)
    l1 = np.where(steps < 650, math.log(36), 0.85 * lk)
    # gap: 0.05 until 350, exactly 0.1 at 400 (not > 0.1), 0.2 from 450: onset 450
    dz = np.select([steps < 400, steps == 400], [0.05, 0.1], 0.2)
    t = pd.DataFrame(
        {
            "step": steps,
            "train_first_loss": l1,
            "train_first_shuffled_loss": l1 + dz,
            "delta_z_train_first": dz,
        }
    )
    r = logged_lead(t, lk, lead_cfg)
    assert r["lead_log_measured"]
    assert (r["log_loss_onset"], r["log_delta_z_onset"], r["lead_log"]) == (650, 450, 200)
    assert r["lead_fraction_log"] == pytest.approx(200 / 650)
    # no training log (a run trained before it existed), or one without the series (a
    # trainer that did not hand L1 over): not measured, said by the flag
    for missing in (
        None,
        t.iloc[:0],
        t.assign(train_first_loss=np.nan, delta_z_train_first=np.nan),
    ):
        r = logged_lead(missing, lk, lead_cfg)
        assert not r["lead_log_measured"] and r["lead_fraction_log"] is None


def test_summarize_reads_train_log_beside_metrics_or_says_not_measured(tmp_path):
    from mbc.runs_pipeline import summarize
    from mbc.training.data import build_dataset
    from mbc.training.train import train_run

    spec = tiny_spec()
    train_run(
        spec, build_dataset(spec.task, spec.seed), tmp_path, torch.device("cpu"), say=lambda s: None
    )
    summarize(spec, tmp_path / "metrics.csv", tmp_path / "s.json", DIAG)
    assert json.loads((tmp_path / "s.json").read_text())["lead_log_measured"]
    kept = (tmp_path / "train_log.csv").read_bytes()
    (tmp_path / "train_log.csv").unlink()  # deleted: its log holds its windows, rebuilt
    summarize(spec, tmp_path / "metrics.csv", tmp_path / "s.json", DIAG)
    assert (tmp_path / "train_log.csv").read_bytes() == kept
    assert json.loads((tmp_path / "s.json").read_text())["lead_log_measured"]
    # an old run: its log has no windows, and no train_log.csv beside metrics.csv
    log = tmp_path / "state" / "log.jsonl"
    rows = [r for r in log.read_text().splitlines() if '"event": "train_window"' not in r]
    log.write_text("\n".join(rows) + "\n")
    (tmp_path / "train_log.csv").unlink()
    summarize(spec, tmp_path / "metrics.csv", tmp_path / "s.json", DIAG)
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["lead_log_measured"] is False and s["lead_fraction_log"] is None


def test_tau_tables_columns_are_typed_once_numbers_flags_and_text():
    """tau.csv's readers (the figures) cast `NUMBER_COLUMNS` and read `FLAG_COLUMNS` as
    flags: a summarized run's every column is one of the three kinds, each as declared."""
    from mbc.core.config_loader import Run
    from mbc.core.spec import DOTTED_COLUMNS, FLAT_COLUMNS, NUMERIC_COLUMNS
    from mbc.diagnostics.summary import (
        FLAG_COLUMNS,
        NUMBER_COLUMNS,
        TAU_COLUMNS,
        TEXT_COLUMNS,
        tau_table,
    )

    spec, lk = tiny_spec(k=5), math.log(5)
    s = summarize_run(spec, metrics(np.linspace(lk, 0.01, 5), np.zeros(5)), DIAG)
    row = tau_table([Run("E1", spec)], {spec.run_id: s}).iloc[0]
    kinds = [*NUMBER_COLUMNS, *FLAG_COLUMNS, *TEXT_COLUMNS]
    assert len(kinds) == len(set(kinds)) and set(kinds) <= set(TAU_COLUMNS)
    rest = set(TAU_COLUMNS) - set(kinds)  # the spec's settings that are no number
    assert rest <= {*FLAT_COLUMNS, *DOTTED_COLUMNS} and not rest & set(NUMERIC_COLUMNS), rest
    numbers = pd.to_numeric(row[NUMBER_COLUMNS], errors="coerce")
    assert numbers.isna().equals(row[NUMBER_COLUMNS].isna())  # no text among the numbers
    assert all(isinstance(row[c], (bool, np.bool_)) for c in FLAG_COLUMNS), row[FLAG_COLUMNS]
    assert row["censored"] == False and row["tau"] > 0  # noqa: E712 (a numpy bool)
