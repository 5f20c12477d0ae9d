"""Synthetic measurements must flip every verdict, by the config's own decision rules."""

from pathlib import Path

import pandas as pd
import pytest
import yaml

from mbc.analysis.config_sections import Hypotheses, Scorecard
from mbc.analysis.hypotheses import combine, decide, evaluate_hypotheses, verdicts
from mbc.analysis.scorecard import agreement, scorecard, tolerance_text
from mbc.analysis.stats import COLUMNS as STATISTICS_COLUMNS

ROOT = Path(__file__).resolve().parents[1]
# the live config on purpose: its own decision rules and scorecard rows are under test
CFG = yaml.safe_load((ROOT / "config.yaml").read_text())
CARD = Scorecard.from_raw(CFG["scorecard"]).rows  # as config.load types it


def stats_for(values: dict[str, tuple]) -> pd.DataFrame:
    rows = [
        {"name": n, "value": v, "ci_low": lo, "ci_high": hi, "n": 3, "n_censored": 0, "what": ""}
        for n, (v, lo, hi) in values.items()
    ]
    return pd.DataFrame(rows, columns=STATISTICS_COLUMNS)


def side(test, where: str) -> tuple:
    """A (value, lo, hi) whose CI lies above / below / across the test's threshold."""
    t = test["threshold"]
    return {
        "above": (t + 2, t + 1, t + 3),
        "below": (t - 2, t - 3, t - 1),
        "across": (t, t - 1, t + 1),
    }[where]


def concrete(pattern: str) -> str:
    return pattern.replace("*", "k20")


@pytest.mark.parametrize("hid", sorted(CFG["hypotheses"]))
@pytest.mark.parametrize(
    "where_pred,where_other,expected",
    [
        ("pred", "pred", "supported"),
        ("other", "other", "falsified"),
        ("across", "across", "inconclusive"),
    ],
)
def test_each_verdict_flips(hid, where_pred, where_other, expected):
    h = CFG["hypotheses"][hid]
    values = {}
    for t in h["tests"]:
        pred = "above" if t["direction"] == "greater" else "below"
        other = "below" if pred == "above" else "above"
        where = {"pred": pred, "other": other, "across": "across"}[where_pred]
        values[concrete(t["statistic"])] = side(t, where)
    got = verdicts(evaluate_hypotheses(Hypotheses.from_raw({hid: h}), stats_for(values)))[hid]
    assert got == expected


@pytest.mark.parametrize("hid", sorted(CFG["hypotheses"]))
def test_missing_or_nan_statistic_is_not_enough_data(hid):
    h = CFG["hypotheses"][hid]
    assert (
        verdicts(evaluate_hypotheses(Hypotheses.from_raw({hid: h}), stats_for({})))[hid]
        == "not enough data"
    )
    nan = {concrete(t["statistic"]): (float("nan"),) * 3 for t in h["tests"]}
    assert (
        verdicts(evaluate_hypotheses(Hypotheses.from_raw({hid: h}), stats_for(nan)))[hid]
        == "not enough data"
    )


def test_glob_statistic_matches_every_fit_and_one_falsified_test_falsifies():
    h = {
        "tests": [{"statistic": "fit:tau_vs_k_at_*", "direction": "greater", "threshold": 0.3}],
        "mechanism": "m",
        "prediction": "p",
    }
    s = stats_for(
        {"fit:tau_vs_k_at_d10000": (1.0, 0.8, 1.2), "fit:tau_vs_k_at_d20000": (0, -0.1, 0.1)}
    )
    table = evaluate_hypotheses(Hypotheses.from_raw({"H5": h}), s)
    assert len(table) == 2 and set(table.test_verdict) == {"supported", "falsified"}
    assert verdicts(table)["H5"] == "falsified"


def test_rule_primitives():
    assert decide(1.0, 0.6, 1.4, "greater", 0.5) == "supported"
    assert decide(1.0, 0.6, 1.4, "less", 0.5) == "falsified"
    assert decide(1.0, float("nan"), 1.4, "less", 0.5) == "not enough data"
    assert combine(["supported", "not enough data"]) == "inconclusive"
    with pytest.raises(ValueError, match="direction"):
        decide(1, 0, 2, "up", 0)


def test_scorecard_agreement_rules_and_references_are_not_measurements():
    assert agreement(1.05, 1.0, 1.1, {"value": 1.0}, {"abs": 0.1}) == "agree"
    assert agreement(1.5, 1.4, 1.6, {"value": 1.0}, {"abs": 0.1}) == "disagree"
    assert (
        agreement(1.2, 1.1, 1.3, {"value": 1.205, "ci": [1.151, 1.307]}, {"ci_overlap": True})
        == "agree"
    )
    assert (
        agreement(0.5, 0.4, 0.6, {"value": 1.205, "ci": [1.151, 1.307]}, {"ci_overlap": True})
        == "disagree"
    )
    assert agreement(7.0, 6, 8, {"value": 3.6}, {"factor": 2.0}) == "agree"
    assert agreement(8.0, 6, 9, {"value": 3.6}, {"factor": 2.0}) == "disagree"
    assert agreement(800, 700, 900, {"range": [500, 1000]}, {"factor": 1.0}) == "agree"
    assert agreement(0.96, 0.86, 1.05, {"range": [1.7, 4.4]}, {"factor": 1.0}) == "disagree"
    assert agreement(300, 200, 400, {"range": [500, 1000]}, {"factor": 2.0}) == "agree"
    assert agreement(240, 200, 400, {"range": [500, 1000]}, {"factor": 2.0}) == "disagree"
    # each rule printed as it is applied: a factor on a range widens the range
    assert tolerance_text({"factor": 1.0}, {"range": [1.7, 4.4]}) == "inside the range"
    assert tolerance_text({"factor": 2.0}, {"range": [500, 1000]}) == "inside the range widened x2"
    assert tolerance_text({"factor": 2.0}, {"value": 3.6}) == "within x2"
    assert tolerance_text({"abs": 0.1}, {"value": 1.0}) == "abs 0.1 or reference in CI"
    assert tolerance_text({"within": 0.2}, {"range": [1, 2]}) == "whole CI within +/- 0.2"
    assert agreement(float("nan"), 0, 1, {"value": 1.0}, {"abs": 1}) == "not measured"
    # every configured row is computed from statistics: no statistic, no measurement
    card = scorecard(CARD, stats_for({}))
    assert len(card) == len(CFG["scorecard"]) and set(card.agreement) == {"not measured"}


def test_ours_statistic_gets_its_own_verdict_beside_the_authors():
    h = {
        "H2": {
            "mechanism": "m",
            "prediction": "p",
            "tests": [
                {
                    "statistic": "fit:duration_vs_lr",
                    "ours": "fit:tau_vs_lr",
                    "direction": "less",
                    "threshold": 0.0,
                    "why": "author: transition window",
                }
            ],
        }
    }
    stats = stats_for({"fit:duration_vs_lr": (0.5, 0.2, 0.8), "fit:tau_vs_lr": (-0.5, -0.8, -0.2)})
    row = evaluate_hypotheses(Hypotheses.from_raw(h), stats).iloc[0]
    assert row.verdict == "falsified" and row.ours_verdict == "supported"
    assert not row.robust_to_definition and row.why == "author: transition window"
    assert "fit:tau_vs_lr = -0.5" in row.ours
    same = evaluate_hypotheses(
        Hypotheses.from_raw(h),
        stats_for({"fit:duration_vs_lr": (0.5, 0.2, 0.8), "fit:tau_vs_lr": (0.4, 0.1, 0.9)}),
    ).iloc[0]
    assert same.ours_verdict == "falsified" and same.robust_to_definition


def test_scorecard_shows_ours_beside_the_authors_and_the_reference_provenance():
    rows = [r for r in CARD if r.statistic in ("lr_duration_ratio_sampled", "direction_ratio_lag")]
    card = scorecard(
        rows,
        stats_for(
            {
                "lr_duration_ratio_sampled": (3.0, 2.0, 4.0),
                "lr_duration_ratio": (20.0, 10.0, 30.0),
                "direction_ratio_lag": (2.0, 1.5, 2.5),
                "direction_ratio": (2.1, 1.6, 2.6),
            }
        ),
    ).set_index("statistic")
    # the lr row: the author's window on his sampled evaluation, ours on fixed contexts
    lr = card.loc["lr_duration_ratio_sampled"]
    assert (lr.agreement, lr.ours_statistic, lr.ours_agreement) == (
        "agree",
        "lr_duration_ratio",
        "disagree",
    )
    assert not lr.robust_to_definition and lr.reference_traced == "author_run"
    # the direction row: his lag statistic, our candidate tau beside it, an untraced range
    d = card.loc["direction_ratio_lag"]
    assert d.reference_traced == "paper_text" and d.ours_statistic == "direction_ratio"
    assert d.robust_to_definition and "no run" in d.note
    # every claim of the paper's says how the author computed it (a claim of our own has
    # no author's statistic); the batch row flags the wording
    paper = [r for r in CFG["scorecard"] if r["paper_reference"]["traced"] != "ours"]
    assert len(paper) > 10 and all(r.get("why") for r in paper)
    batch = next(r for r in CFG["scorecard"] if r["statistic"] == "batch_steps_ratio")
    assert "examples" in batch["paper_reference"]["note"]
