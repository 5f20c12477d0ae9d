import math

import numpy as np
import pandas as pd
import pytest
from helpers import fixture_config

from mbc.analysis.config_sections import Bootstrap, Fit, Statistic, Statistics
from mbc.analysis.fit_tables import FIT_COLUMNS, fit_table
from mbc.analysis.stat_kinds import KINDS, select
from mbc.analysis.stats import compute_statistics, statistic
from mbc.core.frozen import freeze
from mbc.diagnostics.collective import SUMMARY_COLUMNS
from mbc.diagnostics.hessian_table import HESSIAN_COLUMNS
from mbc.diagnostics.routing import ABLATION_COLUMNS
from mbc.diagnostics.summary import TAU_COLUMNS

BOOT = Bootstrap(n_boot=200, ci=0.95, seed=0)


def tau_rows(**cols) -> pd.DataFrame:
    n = len(next(iter(cols.values())))
    base = {c: [np.nan] * n for c in TAU_COLUMNS}
    base.update(
        {
            "model": ["transformer"] * n,
            "censored": [False] * n,
            "steps": [1000] * n,
            "batch_size": [128] * n,
            "k": [10] * n,
        }
    )
    base.update(cols)
    if "run_id" not in cols:
        base["run_id"] = [f"r{i}" for i in range(n)]
    return pd.DataFrame(base)


def declared(name: str, **change) -> Statistic:
    """The fixture config's statistic `name`, with `change` (its kind and parameters)."""
    st = fixture_config()["statistics"][name] | change
    return Statistic(name, st["kind"], freeze(st))


def one(name: str, tau: pd.DataFrame, diverged=frozenset(), tables=None, **change) -> dict:
    """The row of statistic `name` (as the fixture config declares it, with `change`) over `tau`."""
    empty = dict(zip(("collective", "routing_ablation", "hessian"), no_rows()[1:], strict=True))
    tables = {"tau": tau, **empty, **(tables or {})}
    return statistic(declared(name, **change), tables, BOOT, set(diverged))


def test_every_kind_has_a_known_answer_test():
    """Each kind of the registry is exercised below on rows whose answer is known."""
    tested = {
        "mean",
        "median",
        "fraction",
        "spearman",
        "ratio",
        "paired_ratio",
        "loglog_slope",
        "nearest_fraction",
        "mode_at_min",
        "runs",
    }
    assert set(KINDS) == tested


def test_mean_reads_its_experiments_where_and_counts_censored_and_diverged():
    t = tau_rows(
        experiment=["E1", "E1", "E1", "E2", "E1"],
        k=[3, 10, 2, 10, 10],
        height_over_log_k=[0.9, 0.7, 0.1, 0.3, 5.0],
        censored=[False, True, False, False, False],
    )
    r = one("plateau_height_over_log_k", t, diverged={"r4"})
    assert r["value"] == pytest.approx(0.8) and r["n"] == 2  # K = 2 (r2), E2 (r3) left out
    assert r["n_censored"] == 1 and r["n_diverged"] == 1
    assert (
        r["what"] == "mean plateau height / log K over E1 runs (K >= 3); 1 diverged run(s) left out"
    )
    assert one("plateau_height_over_log_k_e1e2", t)["value"] == pytest.approx(
        (0.9 + 0.7 + 0.3 + 5) / 4
    )
    lin = tau_rows(
        experiment=["E13"] * 3,
        model=["linear"] * 2 + ["transformer"],
        k=[10, 20, 10],
        final_candidate_loss=[math.log(10), 0.5 * math.log(20), 9],
    )
    assert one("linear_final_lcand_over_log_k", lin)["value"] == pytest.approx(0.75)


def test_median_of_finite_values_of_another_table():
    h = pd.DataFrame(
        {
            "run_id": list("abcde"),
            "phase": ["plateau"] * 4 + ["mid"],
            "method": ["lanczos"] * 3 + ["power", "lanczos"],
            "anisotropy": [2.0, np.inf, 10.0, 500.0, 99.0],
        }
    )
    r = one("anisotropy_plateau_median", tau_rows(k=[3]), tables={"hessian": h})
    assert r["value"] == pytest.approx(6.0) and r["n"] == 2  # Lanczos's rows only


def test_fraction_with_and_without_a_ci():
    t = tau_rows(experiment=["E13"] * 4, model=["linear"] * 4, censored=[True, False, False, False])
    r = one("linear_transition_fraction", t)
    assert r["value"] == pytest.approx(0.75) and r["n"] == 4 and r["n_censored"] == 1
    assert r["ci_low"] <= 0.75 <= r["ci_high"]
    h = pd.DataFrame(
        {
            "run_id": list("abcd"),
            "phase": "plateau",
            "method": ["lanczos"] * 3 + ["power"],
            "converged_min": [True, False, True, False],
        }
    )
    r = one("lambda_min_converged_fraction", tau_rows(k=[3]), tables={"hessian": h})
    assert r["value"] == pytest.approx(2 / 3) and math.isnan(r["ci_low"])


def test_spearman_trend_abs_and_censored_bound():
    t = tau_rows(
        experiment=["E1"] * 6,
        k=[3, 5, 10, 20, 30, 36],
        lead_fraction=[0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
        lead_fraction_log=[0.6, 0.5, 0.4, 0.3, 0.2, np.nan],
        lead_log_measured=[True] * 5 + [False],
        lead_fraction_first=[0.5] * 6,
        first_target_censored=[False] * 6,
    )
    up = one("lead_fraction_k_spearman", t)
    assert up["value"] == pytest.approx(1.0) and up["n"] == 6
    down = one("lead_fraction_log_k_spearman", t)
    assert down["value"] == pytest.approx(-1.0) and down["n"] == 5
    assert math.isnan(one("lead_fraction_first_k_spearman", t)["value"])  # no spread
    logged = one("lead_fraction_log_mean", t)  # reads only the runs whose log measured it
    assert logged["value"] == pytest.approx(0.4) and logged["n_censored"] == 1
    # |rho|: tau falls with p, but the censored run counts at its budget (1000, the
    # largest): ranks 3 2 1 4 against 1 2 3 4, rho = 1 - 6 * 8 / 60 (not |-1| without it)
    p = tau_rows(
        experiment=["E12"] * 4,
        label_noise=[0.0, 0.05, 0.1, 0.2],
        tau=[400, 300, 200, np.nan],
        censored=[False] * 3 + [True],
    )
    r = one("label_noise_spearman_abs", p)
    assert r["value"] == pytest.approx(0.2) and r["n_censored"] == 1 and r["n"] == 4


def test_ratio_at_the_extremes_and_the_censored_budget_bound():
    t = tau_rows(
        experiment=["E6"] * 4,
        lr=[1e-3, 1e-3, 5e-3, 5e-3],
        tau=[100, 100, 300, np.nan],
        censored=[False, False, False, True],
        steps=[1000, 1000, 1000, 500],
    )
    r = one("lr_tau_ratio", t)
    assert r["value"] == pytest.approx((300 + 500) / 2 / 100)  # the censored run: its budget
    assert r["n_censored"] == 1
    b = tau_rows(experiment=["E7"] * 4, batch_size=[8, 8, 32, 32], tau=[100, 100, 50, 50])
    assert one("batch_examples_ratio", b)["value"] == pytest.approx(800 / 1600)


def test_ratio_of_a_configured_pair_needs_both_windows():
    """The author's E6 statistic: transition-window duration at lr 2e-3 over lr 3e-4; a
    censored run of the pair leaves it unmeasured (no window to measure), whatever the rest."""
    t = tau_rows(
        experiment=["E6"] * 6,
        lr=[3e-4, 3e-4, 2e-3, 2e-3, 5e-3, 5e-3],
        transition_duration=[100, 300, 700, 900, np.nan, 50],
        transition_censored=[False, False, False, False, True, False],
    )
    pair = {"where": {"lr": [2e-3, 3e-4]}}
    r = one("lr_duration_ratio", t, **pair)
    assert r["value"] == pytest.approx(800 / 200)
    assert r["ci_low"] <= r["value"] <= r["ci_high"]
    assert "lr 0.002 / lr 0.0003" in r["what"] and r["n"] == 4 and r["n_censored"] == 0
    cut = t.assign(
        transition_censored=[False, False, True, False, True, False],
        transition_duration=[100, 300, np.nan, 900, np.nan, 50],
    )
    r = one("lr_duration_ratio", cut, **pair)
    assert math.isnan(r["value"]) and r["n_censored"] == 1


def test_ratio_leaves_out_a_run_without_a_window_and_counts_it():
    """A sampled window that closed without a start (the author's no_transition) has no
    duration and is not censored: the ratio reads the other seeds and its note says so."""
    t = tau_rows(
        experiment=["E6"] * 6,
        lr=[3e-4, 3e-4, 3e-4, 2e-3, 2e-3, 2e-3],
        transition_duration_sampled=[100, 300, np.nan, 700, 900, 800],
        transition_sampled_censored=[False] * 6,
    )
    r = one(
        "lr_duration_ratio",
        t,
        where={"lr": [2e-3, 3e-4]},
        y="transition_duration_sampled",
        censored="transition_sampled_censored",
    )
    assert r["value"] == pytest.approx(800 / 200)
    assert r["n"] == 5 and r["n_censored"] == 0
    assert r["what"].endswith(": 1 run(s) without a value left out")


def test_the_authors_lr_fit_reads_his_sampled_windows_and_leaves_out_runs_without_one():
    """H2's lr law on his sampled evaluation: duration = 1000 lr^-1 (planted, exact) on the
    runs with a window; one that never closed (censored, no bound) and one that closed
    without a start (no value, not censored) are left out, as his analyze_lr_sweep.py does."""
    lr = [3e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-3]
    t = tau_rows(
        experiment=["E6"] * 6,
        run_id=[f"r{i}" for i in range(6)],
        lr=lr,
        transition_duration_sampled=[0.3 / x for x in lr[:4]] + [np.nan, np.nan],
        transition_sampled_censored=[False] * 4 + [True, False],
    )
    fit = fit_table(
        [Fit("duration_sampled_vs_lr", "lr", ("E6",), y="transition_duration_sampled")],
        t,
        pd.DataFrame(),
        BOOT,
    ).iloc[0]
    assert fit["exponent"] == pytest.approx(-1.0)
    assert fit["n"] == 4 and fit["n_censored"] == 0 and fit["method"] == "ols"
    assert fit["n_left_out"] == 2  # counted, not silently dropped


def test_ratio_of_a_pair_at_one_k_in_steps_and_examples():
    t = tau_rows(
        experiment=["E7"] * 6,
        k=[20, 20, 20, 20, 36, 36],
        batch_size=[128, 128, 256, 256, 128, 256],
        first_target_tau=[1800, 1800, 1000, 1000, 10, 10],
        first_target_censored=[False] * 6,
    )
    steps = one("batch_steps_ratio", t, where={"k": 20}, pair=[128, 256])
    assert steps["value"] == pytest.approx(1.8) and steps["n"] == 4
    assert steps["what"] == "first-target tau in steps, batch 128 / batch 256 at K=20 (E7)"
    examples = one("batch_examples_ratio_first", t, where={"k": 20}, pair=[128, 256])
    assert examples["value"] == pytest.approx(1.8 * 128 / 256)
    assert one("batch_steps_ratio", t, where={"k": 36})["value"] == pytest.approx(1.0)


def test_paired_ratio_is_the_geometric_mean_and_prefers_the_authors_az_to_b():
    t = tau_rows(
        experiment=["E14"] * 4,
        task=["a_to_b", "bz_to_a"] * 2,
        k=[5, 5, 10, 10],
        seed=[0] * 4,
        tau=[400, 100, 900, 100],
    )
    r = one("direction_ratio", t)
    assert r["value"] == pytest.approx(math.sqrt(4 * 9)) and r["n"] == 2
    assert r["ci_low"] <= r["value"] <= r["ci_high"]
    t = tau_rows(
        experiment=["E14"] * 3,
        task=["az_to_b", "bz_to_a", "a_to_b"],
        k=[5] * 3,
        seed=[0] * 3,
        tau=[300, 100, 900],
    )
    assert one("direction_ratio", t)["value"] == pytest.approx(3.0)


def test_loglog_slope_is_the_authors_fit_of_mean_duration_plus_one():
    """Planted: mean duration + 1 = 100 * factor^0.5 at factors 2, 8, 32 (two seeds each,
    +-d around the mean); factor 1 (private) is left out, whatever its duration."""
    factors = [1, 1, 2, 2, 8, 8, 32, 32]
    means = {f: 100 * f**0.5 - 1 for f in (2, 8, 32)}
    dur = [5000, 7000] + [means[f] + s for f in (2, 8, 32) for s in (-10, 10)]
    t = tau_rows(
        experiment=["E11"] * 8,
        sharing_factor=factors,
        dip_duration=dur,
        dip_censored=[False] * 8,
        dip_bound=[np.nan] * 8,
    )
    r = one("sharing_duration_beta", t)
    assert r["value"] == pytest.approx(0.5, abs=1e-12)
    assert r["ci_low"] < 0.5 < r["ci_high"] and r["n"] == 6
    assert one("sharing_duration_beta", t, offset=0.0)["value"] != pytest.approx(0.5, abs=1e-6)
    # a censored run enters with its bound and is counted
    cens = t.assign(
        dip_duration=[np.nan if i == 7 else d for i, d in enumerate(dur)],
        dip_censored=[i == 7 for i in range(8)],
        dip_bound=[dur[7] if i == 7 else np.nan for i in range(8)],
    )
    rc = one("sharing_duration_beta", cens)
    assert rc["value"] == pytest.approx(0.5, abs=1e-12) and rc["n_censored"] == 1
    few = one("sharing_duration_beta", t[t.sharing_factor <= 2])
    assert math.isnan(few["value"]) and few["what"].endswith(": fewer than 2 sharing factors")


def test_nearest_fraction_reads_each_runs_nearest_checkpoint():
    s = pd.DataFrame(
        {
            "run_id": ["a"] * 3 + ["b"] * 2,
            "tau_fraction": [0.25, 0.5, 1.0, 0.4, 1.0],
            "frac_accurate": [0.0, 0.1, 1.0, 0.3, 1.0],
        }
    )
    r = one("collective_frac_accurate_half_tau", tau_rows(k=[3]), tables={"collective": s})
    assert r["value"] == pytest.approx(0.2) and r["n"] == 2
    assert r["what"] == "mean fraction of groups >= accurate at 0.5 tau"


def test_mode_at_min_is_the_routing_heads_layer():
    abl = pd.DataFrame(
        {
            "run_id": ["a", "a", "b", "b", "c", "c"],
            "phase": "mid",
            "kind": "zero",
            "layer": [0, 1, 0, 1, 0, 1],
            "head": 3,
            "delta_delta_z": [-2, -1, -3, 0, 0, -5],
        }
    )
    r = one("routing_head_layer_mode", tau_rows(k=[3]), tables={"routing_ablation": abl})
    assert r["value"] == 0.0 and r["n"] == 3


def test_runs_counts_every_run_the_diverged_included():
    t = tau_rows(
        experiment=["E1", "E2", "E2"], run_id=["a", "a", "b"], censored=[True, True, False]
    )
    r = one("n_runs", t, diverged={"b"})
    assert (r["value"], r["n"], r["n_censored"], r["n_diverged"]) == (2.0, 2, 1, 1)


def test_where_bounds_lists_and_values():
    t = tau_rows(k=[3, 5, 10, 20], lr=[1e-3, 3e-4, 2e-3, 1e-3], model=["a", "b", "a", "a"])
    assert select(t, {"k": {"above": 3, "max": 10}}).k.tolist() == [5, 10]
    assert select(t, {"lr": [1e-3, 3e-4]}).k.tolist() == [3, 5, 20]  # floats: np.isclose
    assert select(t, {"model": "a", "k": {"below": 20}}).k.tolist() == [3, 10]
    # a bound leaves out a missing value (the author's mean over runs with a lead > 0)
    lead = t.assign(lead_log=pd.array([None, -50, 0, 100], dtype="Int64"))
    assert select(lead, {"lead_log": {"above": 0}}).k.tolist() == [20]
    assert select(lead.astype({"lead_log": float}), {"lead_log": {"above": 0}}).k.tolist() == [20]


def no_rows() -> tuple[pd.DataFrame, ...]:
    """fits.csv, collective_summary.csv, routing_ablation.csv, hessian.csv without rows."""
    return tuple(
        pd.DataFrame(columns=c)
        for c in (FIT_COLUMNS, SUMMARY_COLUMNS, ABLATION_COLUMNS, HESSIAN_COLUMNS)
    )


def test_statistics_without_data_are_nan_rows_not_dropped():
    empty = pd.DataFrame(columns=TAU_COLUMNS)
    raw = fixture_config()
    s = compute_statistics(empty, *no_rows(), BOOT, Statistics.from_raw(raw["statistics"]))
    assert list(s.name) == list(raw["statistics"])  # every declared one, in its order
    assert s.loc[s.name == "direction_ratio", "value"].isna().all()


def test_sign_agreement_rule():
    from mbc.analysis.scorecard import agreement

    ref, rule = {"sign": 1}, {"sign": True}
    assert agreement(0.5, 0.2, 0.8, ref, rule) == "agree"
    assert agreement(-0.5, -0.8, -0.2, ref, rule) == "disagree"
    assert agreement(0.3, -0.1, 0.6, ref, rule) == "inconclusive"
    assert agreement(0.3, float("nan"), float("nan"), ref, rule) == "inconclusive"
    assert agreement(float("nan"), 0, 1, ref, rule) == "not measured"
    assert agreement(-0.5, -0.8, -0.2, {"sign": -1}, rule) == "agree"


# ---- the bootstrap: scipy.stats.bootstrap against the loops it replaced -----------------


def _old_reps(samples, fn, boot):
    """The hand-written loop the kinds used before (each sample resampled apart with
    rng.choice / rng.integers from boot.seed): the Monte Carlo reference."""
    rng = np.random.default_rng(boot.seed)
    if len(samples) == 1:  # rows of one sample
        (values,) = samples
        idx = rng.integers(0, len(values), size=(boot.n_boot, len(values)))
        reps = np.array([fn(values[i]) for i in idx])
    else:
        reps = np.array([fn(*(rng.choice(s, s.size) for s in samples)) for _ in range(boot.n_boot)])
    reps = reps[np.isfinite(reps)]
    return np.quantile(reps, [(1 - boot.ci) / 2, (1 + boot.ci) / 2])


def _slope(*groups):
    xs = np.array([1.0, 2.0, 4.0, 8.0])[: len(groups)]
    return float(np.polyfit(np.log(xs), np.log([g.mean() for g in groups]), 1)[0])


@pytest.mark.parametrize(
    "case",
    ["one_sample", "paired_rows", "two_samples", "k_samples"],
)
def test_scipy_bootstrap_cis_match_the_old_loops_within_monte_carlo_error(case):
    """Same seed, same n_boot: the percentile CIs of scipy's resampling lie within Monte
    Carlo error of the hand-written loops' (a 2.5% quantile of 4000 resamples moves by about
    0.06 bootstrap sd; allowed: 0.1 of the CI's width, about 0.4 sd)."""
    from mbc.analysis.stat_kinds import percentile_bootstrap

    boot = Bootstrap(n_boot=4000, ci=0.95, seed=20260310)
    rng = np.random.default_rng(7)
    if case == "one_sample":
        x = rng.lognormal(size=25)
        samples, fn, new = (
            [x],
            np.mean,
            percentile_bootstrap([np.arange(25)], lambda i: x[i].mean(), boot),
        )
    elif case == "paired_rows":
        p = np.column_stack([np.arange(20.0), np.arange(20.0) + rng.normal(0, 6, 20)])

        def fn(q):
            return float(np.corrcoef(q[:, 0], q[:, 1])[0, 1])

        samples, new = [p], percentile_bootstrap([np.arange(20)], lambda i: fn(p[i]), boot)
    elif case == "two_samples":
        a, b = rng.gamma(4.0, 2.0, 12), rng.gamma(4.0, 1.0, 9)

        def fn(x, y):
            return x.mean() / y.mean()

        samples, new = [a, b], percentile_bootstrap([a, b], fn, boot)
    else:
        groups = [rng.lognormal(np.log(m), 0.3, 5) for m in (10, 20, 45, 80)]
        samples, fn, new = groups, _slope, percentile_bootstrap(groups, _slope, boot)
    old = _old_reps(samples, fn, boot)
    width = old[1] - old[0]
    assert width > 0
    assert np.abs(np.array(new) - old).max() < 0.1 * width, (new, old)


def test_the_bootstrap_holds_a_one_run_group_fixed_and_needs_two_values_somewhere():
    from mbc.analysis.stat_kinds import percentile_bootstrap, ratio_of_means

    one, many = np.array([2.0]), np.array([1.0, 2.0, 3.0, 6.0])
    lo, hi = percentile_bootstrap([many, one], lambda x, y: x.mean() / y.mean(), BOOT)
    assert 0.5 < lo < 1.5 < hi < 2.5  # only `many` varies: mean(many) / 2 is 1.5
    assert np.isnan(percentile_bootstrap([one, one], lambda x, y: x.mean() / y.mean(), BOOT)).all()
    v, lo, hi = ratio_of_means(one, one * 2, BOOT)
    assert v == 0.5 and math.isnan(lo) and math.isnan(hi)


def test_a_ci_needs_half_the_resamples_finite():
    """bootstrap(): a statistic undefined on most resamples (here: NaN unless the resample
    holds the one large value) has no CI, rather than a CI over a biased few."""
    from mbc.analysis.stat_kinds import bootstrap

    x = np.array([0.0] * 19 + [1.0])
    v, lo, hi = bootstrap(x, lambda s: s.max() if s.max() > 0 and s.sum() > 2 else np.nan, BOOT)
    assert math.isnan(v) and math.isnan(lo) and math.isnan(hi)
    v, lo, hi = bootstrap(x, np.mean, BOOT)
    assert v == pytest.approx(0.05) and lo == 0.0 and 0.05 < hi < 0.2
