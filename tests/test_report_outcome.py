"""The report states its outcome in words generated from the tables (mbc.paper.outcome),
beside the paper's verdicts and every row's rule, typeset as LaTeX (mbc.paper.typeset)."""

import fnmatch
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mbc import config as mbc_config
from mbc.analysis.hypotheses import evaluate_hypotheses
from mbc.analysis.scorecard import scorecard
from mbc.paper import outcome
from mbc.paper.report import (
    definitions_table,
    experiments_table,
    fits_table,
    hypotheses_table,
    init_comparison_tex,
    scorecard_table,
)
from mbc.paper.typeset import tex_text

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / "measured" / "paper_cpu"


@pytest.fixture(scope="module")
def cfg():
    return mbc_config.load(mbc_config.read_yaml(str(ROOT / "config.yaml")), {})


@pytest.fixture(scope="module")
def tables(cfg):
    """The committed paper_cpu statistics, decided by the live config's rows and rules."""
    stats = pd.read_csv(MEASURED / "statistics.csv")
    return scorecard(cfg.scorecard.rows, stats), evaluate_hypotheses(cfg.hypotheses, stats)


def _card(rows):
    base = {
        "statistic": "s",
        "measured": 1.0,
        "ci_low": 0.9,
        "ci_high": 1.1,
        "n": 3,
        "n_diverged": 0,
        "paper_reference": "1",
        "tolerance": "abs 0.1 or reference in CI",
        "ours_measured": 1.0,
        "ours_ci_low": 0.9,
        "ours_ci_high": 1.1,
        "reference_traced": "author_run",
        "why": "",
        "note": "",
        "id": "",
        "cause": "",
        "explanation": "",
    }
    out = []
    for r in rows:
        row = {**base, **r}
        row.setdefault("ours_statistic", row["statistic"])
        row.setdefault("ours_agreement", row["agreement"])
        row["robust_to_definition"] = row["agreement"] == row["ours_agreement"]
        out.append(row)
    return pd.DataFrame(out)


def _hyp(rows):
    return pd.DataFrame(
        [
            {
                "id": i,
                "mechanism": f"mechanism {i}",
                "verdict": v,
                "paper_verdict": p,
                "cause": c,
                "explanation": e,
            }
            for i, v, p, c, e in rows
        ]
    )


CARD = [
    {"claim": "plateau height equals log K", "agreement": "agree"},
    {"claim": "tau grows as D^1.2", "agreement": "agree"},
    {
        "claim": "a linear network stays at log K",
        "agreement": "disagree",
        "cause": "failure",
        "explanation": "its level sits above log K",
    },
]
HYP = [
    ("H1", "falsified", "falsified", "", ""),
    ("H2", "inconclusive", "falsified", "seeds", "one seed per rate"),
]


def test_the_abstract_counts_the_rows_and_names_those_that_disagree():
    text = outcome.abstract(_card(CARD), _hyp(HYP))
    assert "Of the paper's 3 headline claims, 2 agree" in text
    assert r"these do not: \emph{a linear network stays at $\log K$} (disagree)" in text
    assert "match the paper's for 1 of the 2 it decides (H1)" in text
    assert "H2 is inconclusive where the paper says falsified" in text


def test_a_verdict_the_paper_leaves_inconclusive_is_not_counted_as_a_decision():
    """H7: the paper leaves it inconclusive; "1 of the 7 it decides" counted it."""
    text = outcome.verdict_sentence(_hyp([*HYP, ("H7", "falsified", "inconclusive", "", "")]))
    assert "on the 3 candidate mechanisms match the paper's for 1 of the 2 it decides" in text
    assert text.endswith("; the paper leaves H7 undecided (ours: falsified).")


def test_flipping_one_row_or_one_verdict_changes_the_sentences():
    flipped = [dict(r) for r in CARD]
    flipped[1]["agreement"] = "disagree"
    text = outcome.abstract(_card(flipped), _hyp(HYP))
    assert "Of the paper's 3 headline claims, 1 agree" in text
    assert r"\emph{$\tau$ grows as $D^{1.2}$} (disagree)" in text
    both = outcome.abstract(_card(CARD), _hyp([HYP[0], ("H2", "falsified", "falsified", "", "")]))
    assert "for 2 of the 2 it decides (H1 and H2)" in both and "where the paper says" not in both


def test_a_row_that_agrees_by_one_definition_only_is_counted_and_explained():
    rows = [
        *CARD,
        {
            "claim": "z-usage leads the loss by ~half the waiting time",
            "agreement": "agree",
            "ours_statistic": "t",
            "ours_agreement": "disagree",
            "cause": "definition",
            "explanation": "another quantity",
        },
    ]
    card = _card(rows)
    assert "1 of those that agree does so only by the author's statistic" in outcome.abstract(
        card, _hyp(HYP)
    )
    text = outcome.explanations(card, _hyp(HYP))
    assert r"\paragraph{$z$-usage leads the loss by about half the waiting time.}" in text
    assert r"\textit{Cause: a difference of definition.} Another quantity." in text
    assert r"\textit{Cause: a failure to reproduce.} Its level sits above $\log K$." in text
    assert r"\textit{Cause: too few seeds.} One seed per rate." in text
    # a plain agreeing row is not explained
    assert "plateau height equals" not in text


def test_a_difference_without_a_config_explanation_says_so():
    card = _card([{**CARD[2], "cause": "", "explanation": ""}])
    assert "No explanation is recorded in config.yaml" in outcome.explanations(card, _hyp(HYP[:1]))


def test_the_conclusion_counts_the_causes_and_names_the_failures():
    robust = pd.DataFrame({"id": ["R1", "R2"], "verdict": ["supported", "falsified"]})
    text = outcome.conclusion(_card(CARD), _hyp(HYP), robust)
    assert (
        "Of the 2 differences, we attribute 1 to a failure to reproduce and 1 to too few seeds"
        in text
    )
    assert r"The claim we fail to reproduce is \emph{a linear network stays at $\log K$}" in text
    assert "1 of our 2 pre-registered statements" in text


def test_every_committed_difference_has_its_explanation_in_config(cfg, tables):
    """The rows of measured/paper_cpu that disagree or agree under one definition only, and
    the verdicts that differ from the paper's, each carry config's reason. A row or verdict
    whose statistic the committed report did not measure (config moved on: a STALE report)
    is no difference to explain: it is "not enough data" until the report is re-measured."""
    card, hyp = tables
    measured = set(pd.read_csv(MEASURED / "statistics.csv").name)
    rows = outcome.paper_rows(card)
    # a row whose statistic the committed report never measured: as for the verdicts below
    never = ~rows.statistic.map(lambda s: bool(fnmatch.filter(measured, s)))
    if never.any():
        assert (MEASURED / "STALE").is_file(), list(rows[never].claim)
    differ = rows[((rows.agreement != "agree") | outcome.one_definition(rows)) & ~never]
    assert len(differ) >= 3
    assert (differ.cause != "").all(), list(differ[differ.cause == ""].claim)
    first = hyp.drop_duplicates("id")
    assert (first.paper_verdict != "").all()  # config holds the paper's seven verdicts
    unmeasured = {
        h.id
        for h in cfg.hypotheses.items
        if any(not fnmatch.filter(measured, t.statistic) for t in h.tests)
    }
    if unmeasured:  # only a stale report lacks a statistic the live config reads
        assert (MEASURED / "STALE").is_file(), sorted(unmeasured)
    off = first[(first.verdict != first.paper_verdict) & ~first.id.isin(unmeasured)]
    assert len(off) and (off.cause != "").all(), list(off.id)
    explained = outcome.explanations(card, hyp[~hyp.id.isin(unmeasured)])
    assert "No explanation is recorded" not in explained


def test_the_tables_are_typeset_and_show_each_rule(tables):
    card, hyp = tables
    tex = scorecard_table(card) + definitions_table(card) + hypotheses_table(hyp)
    for raw in ("D^1.2", "R^2", "~half", ">=", "->", "x2", "textasciicircum", "textasciitilde"):
        assert raw not in tex, raw
    assert "$D^{1.2}$" in tex and "$R^{2}$" in tex and r"$\ge$" in tex and r"$\to$" in tex
    assert r"within $\times$2" in scorecard_table(card)  # every row's rule is a cell
    assert tex.count(" & ") > 0 and "paper" in hypotheses_table(hyp)
    assert r"$^\dagger$" in scorecard_table(card)  # the references traced to the text only


def test_the_hypotheses_table_prints_the_papers_verdict_from_config(cfg, tables):
    _, hyp = tables
    row = next(line for line in hypotheses_table(hyp).splitlines() if line.startswith("H7 "))
    assert row.rstrip(" \\").endswith(dict(cfg.hypotheses.items[6].paper_verdict)["verdict"])


def test_a_tobit_fits_r2_is_left_empty_and_matched_ids_read_as_words():
    fits = pd.DataFrame(
        [
            ("tau_vs_lr", 1.1, 0.3, 1.7, 1e7, -0.25, 4, 1, "tobit"),
            ("tau_vs_d", 1.2, 1.1, 1.3, 2.0, 0.99, 21, 0, "ols"),
        ],
        columns=[
            "name",
            "exponent",
            "ci_low",
            "ci_high",
            "prefactor",
            "r2",
            "n",
            "n_censored",
            "method",
        ],
    )
    tex = fits_table(fits)
    assert "0.990" in tex and "-0.25" not in tex and r"\ensuremath{-}0.250" not in tex
    assert "Too few" not in tex  # every fit has its row


def test_insufficient_fits_leave_the_table_for_one_sentence_that_names_them():
    cols = ["name", "exponent", "ci_low", "ci_high", "prefactor", "r2", "n", "n_censored"]
    nan = float("nan")
    fits = pd.DataFrame(
        [
            ("tau_vs_d", 1.2, 1.1, 1.3, 2.0, 0.99, 21, 0, "ols"),
            ("tau_vs_k_at_d60", nan, nan, nan, nan, nan, 2, 0, "insufficient"),
            ("tau_vs_lr", nan, nan, nan, nan, nan, 1, 0, "insufficient"),
        ],
        columns=[*cols, "method"],
    )
    tex = fits_table(fits)
    body = tex.split(r"\midrule", 1)[1].split(r"\bottomrule", 1)[0]
    assert "insufficient" not in body and body.count(r"\\") == 1  # one row: the fit
    assert "Too few uncensored runs to fit them, no row:" in tex
    assert "K at D = 60" in tex or "d60" in tex.replace(r"\_", "_")  # named, as the rows are
    one = fits_table(fits.iloc[:2])
    assert "Too few uncensored runs to fit it, no row:" in one


def test_the_table_of_experiments_names_each_once_with_its_question_and_runs():
    tau = pd.DataFrame({"experiment": ["E1", "E1", "E2", "E2"], "run_id": ["a", "b", "b", "c"]})
    questions = {"E1": "plateau height = log K", "E2": "does K or D set it?", "E15_E1": "init"}
    tex = experiments_table(tau, questions)
    assert r"\label{tab:experiments}" in tex
    rows = tex.split(r"\midrule", 1)[1].split(r"\bottomrule", 1)[0].strip().splitlines()
    cells = [[c.strip() for c in r.rstrip("\\ ").split("&")] for r in rows]
    assert cells == [
        ["E1", "plateau height = log K", "2"],
        ["E2", "does K or D set it?", "2"],
        [r"E15\_E1", "init", "0"],  # in the config, no run in this report
    ]
    comp = pd.DataFrame(
        [
            {
                "quantity": "K-exponent at fixed D (E2)",
                "match": "d10000",
                "default": -0.04,
                "default_ci_low": -0.1,
                "default_ci_high": 0.02,
                "alternative": -0.06,
                "alternative_ci_low": -0.4,
                "alternative_ci_high": 0.3,
            }
        ]
    )
    tex = init_comparison_tex(comp)
    assert "d10000" not in tex and "at $D$ = 10000" in tex


@pytest.mark.parametrize(
    ("text", "latex"),
    [
        ("tau grows as D^1.2", r"$\tau$ grows as $D^{1.2}$"),
        ("no group is >= 80% accurate at tau/2", r"no group is $\ge$ 80\% accurate at $\tau/2$"),
        ("(B,z)->A 1.7x-4.4x faster", r"$(B, z)$$\to$A 1.7--4.4$\times$ faster"),
        ("whole CI within +/- 0.15", r"whole CI within $\pm$ 0.15"),
        ("by ~half", "by about half"),
        ("a_b & c", r"a\_b \& c"),
        (
            "stays at log K (e_B over the B strings)",
            r"stays at $\log K$ ($e_B$ over the B strings)",
        ),
    ],
)
def test_config_prose_is_typeset(text, latex):
    assert tex_text(text) == latex


def test_many_differences_are_counted_not_listed_and_glob_rows_say_their_match():
    rows = [{"claim": f"claim {i}", "agreement": "disagree"} for i in range(5)]
    rows += [
        {
            "claim": "at fixed D the K-exponent is 0",
            "statistic": f"fit:tau_vs_k_at_d{d}",
            "agreement": "not measured",
            "measured": float("nan"),
        }
        for d in (60, 120)
    ]
    card = _card(rows)
    text = outcome.scorecard_sentence(card)
    assert "of the others, 5 disagree and 2 are not measured" in text and "claim 0" not in text
    # the words follow the counts where a count is 1 (a report of one experiment)
    singular = outcome.scorecard_sentence(_card([CARD[0], rows[0], *rows[-2:], *rows[-2:]]))
    assert "headline claims, 1 agrees with" in singular
    assert "of the others, 4 are not measured and 1 disagrees" in singular
    explained = outcome.explanations(card, _hyp(HYP[:1]))
    assert r"at fixed $D$ the $K$-exponent is 0 (at $D$ = 60).}" in explained
    assert r"(at $D$ = 120).}" in explained
    assert "Not measured here" in explained


def test_thousands_print_as_whole_numbers():
    from mbc.paper.report import value_with_ci

    assert value_with_ci(5347.07, 1507.9, 8540.3) == "5347 [1508, 8540]"
    assert value_with_ci(0.0441, 0.0398, 0.0493) == "0.0441 [0.0398, 0.0493]"


def test_a_tobit_fit_has_no_r2_statistic():
    from mbc.analysis.stats import fit_statistics

    fits = pd.DataFrame(
        [
            ("tau_vs_lr", 1.1, 0.3, 1.7, -0.25, 4, 1, "tobit"),
            ("tau_vs_d", 1.2, 1.1, 1.3, 0.99, 21, 0, "ols"),
        ],
        columns=["name", "exponent", "ci_low", "ci_high", "r2", "n", "n_censored", "method"],
    )
    r2 = {r["name"]: r["value"] for r in fit_statistics(fits) if r["name"].startswith("fit_r2:")}
    assert np.isnan(r2["fit_r2:tau_vs_lr"]) and r2["fit_r2:tau_vs_d"] == 0.99


def test_a_preset_too_small_to_decide_says_so_once_not_under_every_row():
    """Smoke's report said nine times that no explanation is recorded; config
    `report.scale_note` says once why its rows have no cause."""
    uncaused = [dict(r, cause="", explanation="") for r in CARD]
    hyp = _hyp([("H1", "inconclusive", "falsified", "", "")])
    plain = outcome.explanations(_card(uncaused), hyp)
    assert plain.count("No explanation is recorded") == 2
    noted = outcome.explanations(_card(uncaused), hyp, "The runs are too small to decide")
    assert noted.count("The runs are too small to decide") == 1
    assert "No explanation is recorded" not in noted
    assert noted.count(r"\paragraph") == 2  # the row and the verdict, still shown
