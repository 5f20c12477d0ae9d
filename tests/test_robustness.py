"""E15: the `like:` experiments, the exponent difference, the `within` rule and the three
robustness tables, each against a case whose answer is known."""

import copy
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from mbc.analysis.config_sections import Bootstrap, Fit, FitDifference, Scorecard
from mbc.analysis.fit_tables import fit_table
from mbc.analysis.fits import exponent_difference, fit_power_law
from mbc.analysis.hypotheses import decide
from mbc.analysis.robustness import comparison_table, init_scale_table, robustness_table
from mbc.analysis.scorecard import scorecard
from mbc.config import ConfigError, load
from mbc.core.spec import ModelSpec
from mbc.diagnostics.summary import TAU_COLUMNS

ROOT = Path(__file__).resolve().parents[1]
BOOT = Bootstrap(n_boot=400, ci=0.95, seed=7)


@pytest.fixture(scope="module")
def raw():
    # the live config: these tests check its presets and E15 experiments themselves
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def test_like_repeats_the_experiment_under_the_preset_with_its_own_set(raw):
    for preset in ("quick", "smoke"):
        cfg = load(raw, {"preset": preset})
        for base, alt in (("E1", "E15_E1"), ("E2", "E15_E2")):
            a = [r.spec for r in cfg.experiment_runs(base)]
            b = [r.spec for r in cfg.experiment_runs(alt)]
            # each repeated run is one of the base's (smoke's E15_E2 keeps only K = 3)
            assert len(b) > 0 and (len(a) == len(b) or preset == "smoke")
            base = {(sa.task, sa.train, sa.seed) for sa in a}
            for sb in b:
                assert sb.model.init == "normal" and sb.model.weight_std == 0.02
                assert (sb.task, sb.train, sb.seed) in base
    # a preset that changes E1 changes the runs E15_E1 repeats
    custom = copy.deepcopy(raw)
    custom["presets"]["smoke"]["experiments"]["E1"] = {"grid": {"task.k": [4]}}
    cfg = load(custom, {"preset": "smoke"})
    assert {r.spec.task.k for r in cfg.experiment_runs("E15_E1")} == {4}


def test_like_errors_name_the_key(raw):
    bad = copy.deepcopy(raw)
    bad["experiments"]["E15_E1"]["like"] = "E99"
    with pytest.raises(ConfigError, match=r"experiments\.E15_E1\.like.*unknown experiment"):
        load(bad, {"preset": "smoke"})
    chained = copy.deepcopy(raw)
    chained["experiments"]["E15_E2"]["like"] = "E15_E1"
    with pytest.raises(ConfigError, match="itself `like` another"):
        load(chained, {"preset": "smoke"})
    unknown_diff = copy.deepcopy(raw)
    unknown_diff["fit_differences"] = [{"name": "x", "of": ["nope", "tau_vs_d"]}]
    with pytest.raises(ConfigError, match=r"fit_differences\[0\]\.of"):
        load(unknown_diff, {"preset": "smoke"})


def test_the_sweeps_null_point_is_the_authors_init_and_e2s_run(raw):
    for preset in ("paper", "quick", "smoke", "paper_cpu"):
        cfg = load(raw, {"preset": preset})
        e15 = cfg.experiment_runs("E15")
        scales = sorted({round(r.spec.model.init_scale, 3) for r in e15})
        assert scales[0] == pytest.approx(0.25, abs=1e-3)
        assert scales[-1] == pytest.approx(2.0, abs=1e-3)
        assert len(scales) >= (3 if preset == "smoke" else 5)  # smoke: every rule, briefly
        steps = np.diff(np.log2(scales))  # log-spaced
        assert np.all(steps > 0.4)
        default = {r.run_id for r in e15 if r.spec.model.init_std is None}
        assert default and default <= set(cfg.run_ids("E2"))


def test_init_scale_is_the_std_over_the_authors():
    assert ModelSpec(d_model=128).init_scale == pytest.approx(1.0)
    assert ModelSpec(d_model=128, init_std=0.8 / math.sqrt(128) / 4).init_scale == 0.25
    assert ModelSpec(d_model=64, init="normal").init_scale == pytest.approx(0.02 / 0.1)


def _planted(b: float, pattern: list[float]):
    """tau = 0.05 x^b with a multiplicative scatter `pattern` (one factor per seed) that
    is the same at every x, so the least-squares exponent is exactly b."""
    x = np.repeat([1000.0, 2000.0, 4000.0, 8000.0], len(pattern))
    return x, 0.05 * x**b * np.exp(np.tile(pattern, 4))


def test_exponent_difference_recovers_a_planted_shift():
    xa, ya = _planted(1.4, [-0.1, 0.1, -0.05, 0.05])
    xb, yb = _planted(1.2, [0.08, -0.08, 0.0, 0.02])
    fa = fit_power_law(xa, ya, n_boot=500, seed=0, name="a")
    fb = fit_power_law(xb, yb, n_boot=500, seed=1, name="b")
    d = exponent_difference(fa, fb, "shift")
    assert d.exponent == pytest.approx(0.2) == fa.exponent - fb.exponent
    assert d.ci_low < 0.2 < d.ci_high and d.ci_low > 0.0  # the shift is seen, 0 is excluded
    # the difference's CI is wider than either fit's alone
    assert d.ci_high - d.ci_low > max(fa.ci_high - fa.ci_low, fb.ci_high - fb.ci_low)
    same = exponent_difference(fa, fit_power_law(xa, ya, n_boot=500, seed=2, name="a2"), "0")
    assert same.exponent == 0.0 and same.ci_low < 0 < same.ci_high
    none = exponent_difference(fa, fit_power_law(xb, yb, n_boot=0, seed=1), "nan")
    assert math.isnan(none.ci_low) and none.n_boot == 0


@pytest.mark.parametrize(
    ("lo", "hi", "verdict"),
    [
        (0.92, 1.05, "supported"),
        (1.2, 1.3, "falsified"),
        (0.7, 0.8, "falsified"),
        (1.05, 1.2, "inconclusive"),
        (0.5, 1.5, "inconclusive"),
    ],
)
def test_within_rule(lo, hi, verdict):
    assert decide((lo + hi) / 2, lo, hi, "within", 0.1, center=1.0) == verdict
    assert decide(math.nan, lo, hi, "within", 0.1, center=1.0) == "not enough data"


def _tau(rows: list[dict]) -> pd.DataFrame:
    base = {c: np.nan for c in TAU_COLUMNS}
    base.update(
        model="transformer",
        task="bz_to_a",
        batch_size=128,
        censored=False,
        init="transformer_lens",
        steps=20000,
    )
    return pd.DataFrame([{**base, **r} for r in rows], columns=TAU_COLUMNS)


def test_init_scale_table_and_tau_vs_init_std_fit_recover_a_planted_law():
    rows = []
    for i, scale in enumerate([0.25, 0.354, 0.5, 0.707, 1.0, 1.414, 2.0]):
        for seed in range(3):
            tau = 3000 * scale**-0.7 * (1 + 0.02 * (seed - 1))
            censored = scale == 0.25 and seed == 2  # one run beyond its budget (7000 < tau)
            rows.append(
                dict(
                    run_id=f"r{i}{seed}",
                    experiment="E15",
                    k=10,
                    d=10000,
                    seed=seed,
                    init_std=0.0707 * scale,
                    init_scale=scale,
                    tau=None if censored else round(tau),
                    censored=censored,
                    height_over_log_k=1.0 + 0.01 * seed,
                    steps=7000 if censored else 20000,
                )
            )
    tau = _tau(rows)
    table = init_scale_table(tau, "E15", BOOT)
    assert list(table.init_scale) == sorted(table.init_scale) and len(table) == 7
    first = table.iloc[0]
    assert (first.n_runs, first.n_censored) == (3, 1)
    assert first.tau_mean == pytest.approx(
        np.mean([3000 * 0.25**-0.7 * f for f in (0.98, 1.0)]), rel=1e-3
    )
    assert table.height_over_log_k.tolist() == pytest.approx([1.01] * 7)
    fits = fit_table([Fit("tau_vs_init_std", "init_std", ("E15",))], tau, pd.DataFrame(), BOOT)
    fit = fits.iloc[0]
    assert fit.method == "tobit" and fit.n_censored == 1
    assert fit.ci_low < -0.7 < fit.ci_high and fit.exponent == pytest.approx(-0.7, abs=0.02)


def test_fit_differences_in_the_fit_table():
    rows = []
    for exp, b, init in (("E1", 1.2, "transformer_lens"), ("E15_E1", 1.5, "normal")):
        for k in (3, 5, 10, 20):
            for seed in range(2):
                d = 1000 * k
                rows.append(
                    dict(
                        run_id=f"{exp}{k}{seed}",
                        experiment=exp,
                        k=k,
                        d=d,
                        seed=seed,
                        init=init,
                        tau=round(0.05 * d**b * (1 + 0.03 * seed)),
                    )
                )
    fits = fit_table(
        [Fit("tau_vs_d", "d", ("E1",)), Fit("tau_vs_d_alt_init", "d", ("E15_E1",))],
        _tau(rows),
        pd.DataFrame(),
        BOOT,
        [FitDifference("d_exponent_init_shift", ("tau_vs_d_alt_init", "tau_vs_d"))],
    )
    shift = fits.set_index("name").loc["d_exponent_init_shift"]
    assert shift.exponent == pytest.approx(0.3, abs=0.01)
    assert 0.0 < shift.ci_low < 0.3 < shift.ci_high
    assert shift.method == "difference"
    with pytest.raises(ValueError, match="no fit named"):
        fit_table([], _tau(rows), pd.DataFrame(), BOOT, [FitDifference("x", ("a", "b"))])


def _stats(rows):
    return pd.DataFrame(rows, columns=["name", "value", "ci_low", "ci_high"])


def test_comparison_pairs_globs_by_what_they_match_and_robustness_verdicts():
    stats = _stats(
        [
            ("fit:tau_vs_k_at_d2000", 0.01, -0.1, 0.12),
            ("fit:tau_vs_k_at_d4000", 0.3, 0.2, 0.4),
            ("fit:tau_vs_k_alt_init_at_d2000", 0.05, -0.05, 0.1),
            ("fit:tau_vs_k_alt_init_at_d4000", -0.3, -0.5, -0.2),
            ("h_alt", 1.02, 0.98, 1.06),
        ]
    )
    compare = [
        {
            "quantity": "K-exponent",
            "default": "fit:tau_vs_k_at_*",
            "alternative": "fit:tau_vs_k_alt_init_at_*",
        },
        {"quantity": "missing", "default": "nope", "alternative": "h_alt"},
    ]
    table = comparison_table(compare, stats)
    k = table[table.quantity == "K-exponent"].set_index("match")
    assert k.loc["d2000", "default"] == 0.01 and k.loc["d2000", "alternative"] == 0.05
    assert k.loc["d4000", "alternative_statistic"] == "fit:tau_vs_k_alt_init_at_d4000"
    miss = table[table.quantity == "missing"].iloc[0]
    assert math.isnan(miss.default) and miss.alternative == 1.02
    claims = Scorecard.from_raw(
        [
            {
                "id": "R2",
                "claim": "K",
                "statistic": "fit:tau_vs_k_alt_init_at_*",
                "paper_reference": {"value": 0.0, "traced": "ours"},
                "agree": {"within": 0.15},
            },
            {
                "id": "R3",
                "claim": "h",
                "statistic": "h_alt",
                "paper_reference": {"value": 1.0, "traced": "ours"},
                "agree": {"within": 0.1},
            },
            {
                "id": "R9",
                "claim": "absent",
                "statistic": "nothing",
                "paper_reference": {"value": 0.0, "traced": "ours"},
                "agree": {"within": 0.1},
            },
            {
                "id": "R5",
                "claim": "grows",
                "statistic": "h_alt",
                "paper_reference": {"sign": -1, "traced": "ours"},
                "agree": {"sign": True},
            },
            {
                "claim": "a claim of the paper's",
                "statistic": "h_alt",
                "paper_reference": {"value": 1.0, "traced": "author_run"},
                "agree": {"abs": 0.1},
            },
        ]
    )
    verdicts = robustness_table(claims.ours, stats)
    assert list(verdicts.id.unique()) == ["R2", "R3", "R9", "R5"]  # the claims of our own only
    assert verdicts[verdicts.id == "R5"].verdict.iloc[0] == "falsified"  # CI wholly > 0
    r2 = verdicts[verdicts.id == "R2"]
    assert r2.test_verdict.tolist() == ["supported", "falsified"]
    assert set(r2.verdict) == {"falsified"}  # any falsified test falsifies the statement
    assert verdicts[verdicts.id == "R3"].verdict.iloc[0] == "supported"
    assert verdicts[verdicts.id == "R9"].verdict.iloc[0] == "not enough data"
    assert "within 1 +/- 0.1" in verdicts[verdicts.id == "R3"].rule.iloc[0]
    # the scorecard decides the same claims by the same rule, in its own words
    card = scorecard(claims.rows, stats.assign(n=2)).set_index("claim")
    assert card.loc["h", "agreement"] == "agree" and card.loc["h", "id"] == "R3"
    assert card.loc["grows", "agreement"] == "disagree"
    assert card.loc["absent", "agreement"] == "not measured"
    k = card.loc["K"].set_index("statistic").agreement.to_dict()
    assert k == {
        "fit:tau_vs_k_alt_init_at_d2000": "agree",
        "fit:tau_vs_k_alt_init_at_d4000": "disagree",
    }
    assert card.loc["a claim of the paper's", "id"] == ""


def test_the_alternative_init_std_macro_reads_the_runs_under_another_init():
    """AltInitStd: the std of the runs whose init is not the default (not the sweep's, whose
    init is the default with other stds), found without naming experiments."""
    from mbc.paper.report import robustness_numbers

    tau = pd.DataFrame(
        {
            "experiment": ["E2", "E15", "E15_E1", "E15_E2"],
            "init": ["transformer_lens", "transformer_lens", "normal", "normal"],
            "init_std": [0.0707, 0.0354, 0.02, 0.02],
        }
    )
    robust = pd.DataFrame(columns=["id", "verdict"])
    scale = pd.DataFrame({"init_scale": [0.5, 1.0]})
    v = robustness_numbers(robust, scale, tau)
    assert v["AltInitStd"] == 0.02 and (v["InitSweepScaleMin"], v["InitSweepScaleMax"]) == (
        0.5,
        1.0,
    )
    assert robustness_numbers(robust, scale, tau[tau.init != "normal"])["AltInitStd"] is None
