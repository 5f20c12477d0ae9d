"""Issue 24's "done when": a new experiment, its fit, its statistics and a scorecard row of
our own need config alone.

E16 varies model.n_layers; its fit takes x `model.n_layers`, its statistics read the same
column and its scorecard row is `traced: ours`. The config is checked like the workflow's
(schema, references), its runs expanded, tau.csv's rows assembled from synthetic summaries
(no training), and the fits, statistics and scorecard computed from them.
"""

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from test_statistics import BOOT, no_rows

from mbc.analysis.fit_tables import fit_table
from mbc.analysis.robustness import robustness_table
from mbc.analysis.scorecard import scorecard
from mbc.analysis.stats import compute_statistics
from mbc.config import ConfigError, load
from mbc.diagnostics.summary import tau_table
from mbc.paper.report import robustness_numbers, robustness_tex, scorecard_table

ROOT = Path(__file__).resolve().parents[1]
E16 = {
    "experiments": {"E16": {"set": {"task.k": 3}, "grid": {"model.n_layers": [1, 2, 4, 8]}}},
    "fits": [{"name": "tau_vs_n_layers", "experiments": ["E16"], "x": "model.n_layers"}],
    "statistics": {
        "n_layers_tau_ratio": {
            "kind": "ratio",
            "experiments": ["E16"],
            "by": "model.n_layers",
            "pair": ["min", "max"],
            "y": "tau",
            "bound": True,
            "censored": "censored",
            "what": "tau at the fewest layers / at the most ({experiments})",
        },
        "n_layers_spearman": {
            "kind": "spearman",
            "experiments": ["E16"],
            "x": "model.n_layers",
            "y": "tau",
            "bound": True,
            "what": "Spearman rho of tau with the depth ({experiments})",
        },
    },
    "scorecard": [
        {
            "id": "D1",
            "claim": "deeper models wait less (E16)",
            "statistic": "n_layers_spearman",
            "paper_reference": {"sign": -1, "traced": "ours"},
            "agree": {"sign": True},
        }
    ],
}


def with_e16(raw: dict) -> dict:
    cfg = copy.deepcopy(raw)
    cfg["experiments"] |= E16["experiments"]
    cfg["fits"] = cfg["fits"] + E16["fits"]
    cfg["statistics"] = cfg["statistics"] | E16["statistics"]
    cfg["scorecard"] = cfg["scorecard"] + E16["scorecard"]
    cfg["only"] = ["E16"]
    return cfg


@pytest.fixture(scope="module")
def raw():
    # the live config on purpose: E16 must need nothing beyond it but its own entries
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def test_e16_tau_vs_n_layers_needs_config_alone(raw):
    """Planted tau = 1000 * n_layers^-0.5 on the smoke preset: the fit recovers the exponent,
    the ratio is 8^0.5, the Spearman rho -1."""
    cfg = load(with_e16(raw), {"preset": "smoke"})
    runs = cfg.experiment_runs("E16")
    assert sorted(r.spec.model.n_layers for r in runs) == [1, 2, 4, 8]
    summaries = {
        r.run_id: {
            "tau": round(1000 * r.spec.model.n_layers**-0.5),
            "censored": False,
            "steps": 5000,
            "threshold": 0.5,
        }
        for r in runs
    }
    tau = tau_table(runs, summaries)
    assert tau["model.n_layers"].tolist() == [1, 2, 4, 8]  # the field reaches tau.csv
    fits = fit_table(cfg.fits.declared, tau, no_rows()[3], BOOT)
    fit = fits.set_index("name").loc["tau_vs_n_layers"]
    assert fit.exponent == pytest.approx(-0.5, abs=2e-3) and fit.n == 4
    stats = compute_statistics(tau, fits, *no_rows()[1:], BOOT, cfg.statistics)
    s = stats.set_index("name")
    assert s.loc["n_layers_tau_ratio", "value"] == pytest.approx(1000 / 354)
    assert s.loc["n_layers_tau_ratio", "what"] == "tau at the fewest layers / at the most (E16)"
    assert s.loc["n_layers_spearman", "value"] == pytest.approx(-1.0)
    assert s.loc["fit:tau_vs_n_layers", "value"] == pytest.approx(fit.exponent)
    assert np.isnan(s.loc["direction_ratio", "value"])  # E14 not run: a NaN row, not dropped
    card = scorecard(cfg.scorecard.rows, stats).set_index("claim")
    ours = card.loc["deeper models wait less (E16)"]
    assert ours.reference_traced == "ours" and ours.agreement == "agree"
    # the PDF's scorecard table holds the paper's claims; ours are the robustness table's
    assert "deeper models" not in scorecard_table(card.reset_index())
    assert r"plateau height equals $\log K$" in scorecard_table(card.reset_index())
    # a claim of our own also gets its verdict row and macro, beside E15's statements
    claims = robustness_table(cfg.scorecard.ours, stats).drop_duplicates("id").set_index("id")
    assert list(claims.index) == ["R1", "R2", "R3", "R4", "D1"]
    assert claims.loc["D1", "verdict"] == "supported"
    macros = robustness_numbers(claims.reset_index(), pd.DataFrame({"init_scale": []}), tau)
    assert macros["VerdictDOne"] == "supported" and macros["NRobustnessTests"] == 5
    assert "deeper models wait less" in robustness_tex(claims.reset_index())


def test_a_fit_on_a_non_numeric_field_is_refused(raw):
    cfg = with_e16(raw)
    cfg["fits"][-1]["x"] = "model.kind"
    with pytest.raises(ConfigError, match=r"fits.*x' = 'model.kind'"):
        load(cfg, {"preset": "smoke"})
