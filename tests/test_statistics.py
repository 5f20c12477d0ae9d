import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from mbc.analysis.fit_tables import FIT_COLUMNS
from mbc.analysis.stats import (
    collective_fraction_at,
    compute_statistics,
    direction_ratio,
    extreme_ratio,
    routing_head_layer,
)
from mbc.diagnostics.collective import SUMMARY_COLUMNS
from mbc.diagnostics.hessian import HESSIAN_COLUMNS
from mbc.diagnostics.routing import ABLATION_COLUMNS
from mbc.diagnostics.summary import TAU_COLUMNS

BOOT = {"n_boot": 200, "ci": 0.95, "seed": 0}
ROOT = Path(__file__).resolve().parents[1]


def tau_rows(**cols) -> pd.DataFrame:
    n = len(next(iter(cols.values())))
    base = {c: [np.nan] * n for c in TAU_COLUMNS}
    base.update({"model": ["transformer"] * n, "censored": [False] * n, "steps": [1000] * n,
                 "batch_size": [128] * n, "k": [10] * n})  # fmt: skip
    base.update(cols)
    if "run_id" not in cols:
        base["run_id"] = [f"r{i}" for i in range(n)]
    return pd.DataFrame(base)


def test_direction_ratio_is_the_geometric_mean_of_paired_ratios():
    t = tau_rows(experiment=["E14"] * 4, task=["a_to_b", "bz_to_a"] * 2, k=[5, 5, 10, 10],
                 seed=[0] * 4, tau=[400, 100, 900, 100])  # fmt: skip
    r = direction_ratio(t, ["E14"], BOOT)
    assert r["value"] == pytest.approx(math.sqrt(4 * 9))
    assert r["ci_low"] <= r["value"] <= r["ci_high"]


def test_extreme_ratio_lr_and_censored_budget_bound():
    t = tau_rows(experiment=["E6"] * 4, lr=[1e-3, 1e-3, 5e-3, 5e-3], tau=[100, 100, 300, np.nan],
                 censored=[False, False, False, True], steps=[1000, 1000, 1000, 500])  # fmt: skip
    r = extreme_ratio(t, ["E6"], "lr", "tau", BOOT, "lr_tau_ratio", "")
    assert r["value"] == pytest.approx(
        (300 + 500) / 2 / 100
    )  # the censored run counts at its budget
    assert r["n_censored"] == 1


def test_collective_fraction_nearest_checkpoint():
    s = pd.DataFrame({"run_id": ["a"] * 3 + ["b"] * 2, "tau_fraction": [0.25, 0.5, 1.0, 0.4, 1.0],
                      "frac_accurate": [0.0, 0.1, 1.0, 0.3, 1.0]})  # fmt: skip
    assert collective_fraction_at(s, 0.5).tolist() == [0.1, 0.3]


def test_routing_head_layer_mode():
    abl = pd.DataFrame({"run_id": ["a", "a", "b", "b", "c", "c"], "phase": "mid", "kind": "zero",
                        "layer": [0, 1, 0, 1, 0, 1], "head": 3,
                        "delta_delta_z": [-2, -1, -3, 0, 0, -5]})  # fmt: skip
    assert routing_head_layer(abl) == 0.0


def no_rows() -> tuple[pd.DataFrame, ...]:
    """fits.csv, collective_summary.csv, routing_ablation.csv, hessian.csv without rows."""
    return tuple(pd.DataFrame(columns=c) for c in (FIT_COLUMNS, SUMMARY_COLUMNS,
                                                   ABLATION_COLUMNS, HESSIAN_COLUMNS))  # fmt: skip


def test_statistics_without_data_are_nan_rows_not_dropped():
    empty = pd.DataFrame(columns=TAU_COLUMNS)
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    cfg, lead = raw["statistics"], raw["diagnostics"]["lead"]["source"]
    s = compute_statistics(empty, *no_rows(), BOOT, cfg, lead)
    assert {"plateau_height_over_log_k", "direction_ratio", "lead_fraction_mean"} <= set(s.name)
    assert s.loc[s.name == "direction_ratio", "value"].isna().all()


def test_lr_duration_ratio_is_the_configured_pair_and_needs_both_windows():
    """The author's E6 statistic: transition-window duration at lr 2e-3 over lr 3e-4; a
    censored run of the pair leaves it unmeasured (no window to measure), whatever the rest."""
    from mbc.analysis.stats import lr_duration_ratio

    t = tau_rows(experiment=["E6"] * 6, lr=[3e-4, 3e-4, 2e-3, 2e-3, 5e-3, 5e-3],
                 transition_duration=[100, 300, 700, 900, np.nan, 50],
                 transition_censored=[False, False, False, False, True, False])  # fmt: skip
    pair = {"lrs": [2e-3, 3e-4]}
    r = lr_duration_ratio(t, ["E6"], pair, BOOT)
    assert r["value"] == pytest.approx(800 / 200)
    assert r["ci_low"] <= r["value"] <= r["ci_high"]
    assert "lr 0.002 / lr 0.0003" in r["what"] and r["n"] == 4 and r["n_censored"] == 0
    cut = t.assign(transition_censored=[False, False, True, False, True, False],
                   transition_duration=[100, 300, np.nan, 900, np.nan, 50])  # fmt: skip
    r = lr_duration_ratio(cut, ["E6"], pair, BOOT)
    assert math.isnan(r["value"]) and r["n_censored"] == 1
    assert math.isnan(lr_duration_ratio(t, ["E6"], {}, BOOT)["value"])


def test_batch_pair_ratios_in_steps_and_examples():
    from mbc.analysis.stats import batch_pair_ratios

    t = tau_rows(experiment=["E7"] * 6, k=[20, 20, 20, 20, 36, 36],
                 batch_size=[128, 128, 256, 256, 128, 256],
                 first_target_tau=[1800, 1800, 1000, 1000, 10, 10],
                 first_target_censored=[False] * 6)  # fmt: skip
    steps, examples = batch_pair_ratios(t, ["E7"], {"batches": [128, 256], "k": 20}, BOOT)
    assert steps["name"] == "batch_steps_ratio" and steps["value"] == pytest.approx(1.8)
    assert examples["value"] == pytest.approx(1.8 * 128 / 256)
    # K unset: the smallest K of E7
    assert batch_pair_ratios(t, ["E7"], {"batches": [128, 256]}, BOOT)[0]["value"] == pytest.approx(
        1.8
    )
    assert math.isnan(batch_pair_ratios(t, ["E7"], {}, BOOT)[0]["value"])


def test_direction_ratio_prefers_the_authors_az_to_b():
    t = tau_rows(experiment=["E14"] * 3, task=["az_to_b", "bz_to_a", "a_to_b"], k=[5] * 3,
                 seed=[0] * 3, tau=[300, 100, 900])  # fmt: skip
    assert direction_ratio(t, ["E14"], BOOT)["value"] == pytest.approx(3.0)


def test_the_lead_statistics_read_their_configured_source():
    """lead_fraction_mean and lead_fraction_first_mean read diagnostics.lead.source's runs."""
    t = tau_rows(experiment=["E1", "E1", "E2", "E2"], lead_fraction=[0.2, 0.4, 0.8, 0.9],
                 lead_fraction_first=[0.1, 0.3, 0.5, 0.7], first_target_censored=[False] * 4)  # fmt: skip
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    for source, lead, first in (("E1", 0.3, 0.2), ("E2", 0.85, 0.6)):
        s = compute_statistics(t, *no_rows(), BOOT, raw["statistics"], source)
        s = s.set_index("name")
        assert s.loc["lead_fraction_mean", "value"] == pytest.approx(lead)
        assert s.loc["lead_fraction_first_mean", "value"] == pytest.approx(first)
        assert f"over {source} runs" in s.loc["lead_fraction_mean", "what"]


def test_sharing_beta_is_the_authors_loglog_fit_of_mean_duration_plus_one():
    """Planted: mean duration + 1 = 100 * factor^0.5 at factors 2, 8, 32 (two seeds each,
    +-d around the mean); factor 1 (private) is left out, whatever its duration."""
    from mbc.analysis.stats import sharing_beta

    factors = [1, 1, 2, 2, 8, 8, 32, 32]
    means = {f: 100 * f**0.5 - 1 for f in (2, 8, 32)}
    dur = [5000, 7000] + [means[f] + s for f in (2, 8, 32) for s in (-10, 10)]
    t = tau_rows(experiment=["E11"] * 8, sharing_factor=factors, dip_duration=dur,
                 dip_censored=[False] * 8, dip_bound=[np.nan] * 8)  # fmt: skip
    r = sharing_beta(t, ["E11"], {"offset": 1.0, "min_sharing_factor": 1.0}, BOOT)
    assert r["name"] == "sharing_duration_beta"
    assert r["value"] == pytest.approx(0.5, abs=1e-12)
    assert r["ci_low"] < 0.5 < r["ci_high"] and r["n"] == 6
    # without the +1 the slope differs (the offset is applied)
    r0 = sharing_beta(t, ["E11"], {"offset": 0.0, "min_sharing_factor": 1.0}, BOOT)
    assert r0["value"] != pytest.approx(0.5, abs=1e-6)
    # a censored run enters with its bound and is counted
    cens = t.assign(dip_duration=[np.nan if i == 7 else d for i, d in enumerate(dur)],
                    dip_censored=[i == 7 for i in range(8)],
                    dip_bound=[dur[7] if i == 7 else np.nan for i in range(8)])  # fmt: skip
    rc = sharing_beta(cens, ["E11"], {"offset": 1.0}, BOOT)
    assert rc["value"] == pytest.approx(0.5, abs=1e-12) and rc["n_censored"] == 1
    one = sharing_beta(t[t.sharing_factor <= 2], ["E11"], {}, BOOT)
    assert math.isnan(one["value"])


def test_lead_trend_spearman_and_the_logged_lead_mean():
    """The lead-vs-K trend: rho = +1 on a planted increasing series, -1 decreasing; the
    logged lead's mean reads only runs whose training log measured it."""
    from mbc.analysis.stats import lead_trend

    t = tau_rows(experiment=["E1"] * 6, k=[3, 5, 10, 20, 30, 36],
                 lead_fraction=[0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
                 lead_fraction_log=[0.6, 0.5, 0.4, 0.3, 0.2, np.nan],
                 lead_log_measured=[True] * 5 + [False],
                 lead_fraction_first=[0.5] * 6, first_target_censored=[False] * 6)  # fmt: skip
    up = lead_trend(t, "lead_fraction", BOOT, "x", "y")
    assert up["value"] == pytest.approx(1.0) and up["n"] == 6
    down = lead_trend(t, "lead_fraction_log", BOOT, "x", "y")
    assert down["value"] == pytest.approx(-1.0) and down["n"] == 5
    assert math.isnan(lead_trend(t, "lead_fraction_first", BOOT, "x", "y")["value"])  # no spread
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    s = compute_statistics(t, *no_rows(), BOOT, raw["statistics"], "E1").set_index("name")
    assert s.loc["lead_fraction_log_mean", "value"] == pytest.approx(0.4)
    assert s.loc["lead_fraction_log_mean", "n_censored"] == 1  # not measured
    assert s.loc["lead_fraction_log_k_spearman", "value"] == pytest.approx(-1.0)
    assert s.loc["lead_fraction_k_spearman", "value"] == pytest.approx(1.0)


def test_sign_agreement_rule():
    from mbc.analysis.scorecard import agreement

    ref, rule = {"sign": 1}, {"sign": True}
    assert agreement(0.5, 0.2, 0.8, ref, rule) == "agree"
    assert agreement(-0.5, -0.8, -0.2, ref, rule) == "disagree"
    assert agreement(0.3, -0.1, 0.6, ref, rule) == "inconclusive"
    assert agreement(0.3, float("nan"), float("nan"), ref, rule) == "inconclusive"
    assert agreement(float("nan"), 0, 1, ref, rule) == "not measured"
    assert agreement(-0.5, -0.8, -0.2, {"sign": -1}, rule) == "agree"
