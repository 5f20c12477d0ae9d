"""Generated LaTeX inputs of the paper: booktabs tables and numbers.tex (showyourwork's idea).

Every macro and table cell comes from a results table; the paper source types no number.
"""

from __future__ import annotations

import math
import re

import pandas as pd

from mbc.hypotheses import verdicts
from mbc.latex import Raw, booktabs_table, format_number, numbers_tex

ORDINAL = ["One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine"]


def _stat(stats: pd.DataFrame, name: str, col: str = "value"):
    row = stats.loc[stats.name == name]
    return None if row.empty or pd.isna(row[col].iloc[0]) else float(row[col].iloc[0])


def numbers(preset: str, tau: pd.DataFrame, fits: pd.DataFrame, stats: pd.DataFrame,
            hyp: pd.DataFrame, card: pd.DataFrame) -> dict:  # fmt: skip
    """The macro values the paper prose uses (None renders as n/a)."""
    runs = tau.drop_duplicates("run_id")
    fit = fits.set_index("name")

    def f(name, col):
        return (
            None
            if name not in fit.index or pd.isna(fit.loc[name, col])
            else float(fit.loc[name, col])
        )

    at_d = sorted(
        (int(m.group(1)), n) for n in fits.name if (m := re.fullmatch(r"tau_vs_k_at_d(\d+)", n))
    )
    v = verdicts(hyp)
    out = {
        "Preset": preset,
        "NRuns": len(runs),
        "NRunsCensored": int(runs.censored.astype(bool).sum()),
        "NExperiments": tau.experiment.nunique(),
        "PlateauHeightOverLogKMean": _stat(stats, "plateau_height_over_log_k"),
        "FitTauVsDExponent": f("tau_vs_d", "exponent"),
        "FitTauVsDCILow": f("tau_vs_d", "ci_low"),
        "FitTauVsDCIHigh": f("tau_vs_d", "ci_high"),
        "FitTauVsDRsq": f("tau_vs_d", "r2"),
        "FitTauVsDN": None if "tau_vs_d" not in fit.index else int(fit.loc["tau_vs_d", "n"]),
        "FitTauVsKAtSmallestDExponent": f(at_d[0][1], "exponent") if at_d else None,
        "LeadFractionMean": _stat(stats, "lead_fraction_mean"),
        "LeadFractionFirstMean": _stat(stats, "lead_fraction_first_mean"),
        "AnisotropyMedian": _stat(stats, "anisotropy_plateau_median"),
        "AnisotropyMedianPower": _stat(stats, "anisotropy_plateau_median_power"),
        "NScorecardAgree": int((card.agreement == "agree").sum()),
        "NScorecardAgreeOurs": int((card.ours_agreement == "agree").sum()),
        "NScorecardDual": int((card.ours_statistic != card.statistic).sum()),
        "NScorecardRobust": int(
            (card.robust_to_definition.astype(bool) & (card.ours_statistic != card.statistic)).sum()
        ),
        "NScorecardRows": len(card),
        "NScorecardUntraced": int((card.reference_traced == "paper_text").sum()),
        "NVerdictsDual": int(hyp.groupby("id").dual.any().sum()),
        "NVerdictsRobust": int(
            hyp[hyp.groupby("id").dual.transform("any")]
            .drop_duplicates("id")
            .robust_to_definition.astype(bool)
            .sum()
        ),
    }
    for i in range(7):
        out[f"VerdictH{ORDINAL[i]}"] = v.get(f"H{i + 1}")
    return out


def numbers_file(values: dict) -> str:
    fmt = {k: ".3g" for k, v in values.items() if isinstance(v, float)}
    return numbers_tex(values, fmt=fmt, source="mbc.report.numbers (generated; do not edit)")


def fits_table(fits: pd.DataFrame) -> str:
    return booktabs_table(
        fits,
        caption=Raw(
            r"Power-law fits $y = c\,x^b$ across runs, with bootstrap confidence intervals "
            r"over runs; censored runs enter a Tobit fit and are counted, never dropped."
        ),
        label="tab:fits",
        columns={
            "name": "fit",
            "exponent": Raw("$b$"),
            "ci_low": "CI low",
            "ci_high": "CI high",
            "prefactor": Raw("$c$"),
            "r2": Raw("$R^2$"),
            "n": "n",
            "n_censored": "censored",
            "method": "method",
        },  # fmt: skip
        formats={
            "exponent": ".3f",
            "ci_low": ".3f",
            "ci_high": ".3f",
            "prefactor": ".3g",
            "r2": ".3f",
        },
    )


def value_with_ci(value, lo, hi, spec: str = ".3g") -> Raw:
    """One cell: `value [lo, hi]`, or the value alone without a CI (en dash when missing)."""
    v = format_number(value, spec)
    if is_missing(lo) or is_missing(hi):
        return Raw(v)
    return Raw(f"{v} [{format_number(lo, spec)}, {format_number(hi, spec)}]")


def hypotheses_table(hyp: pd.DataFrame) -> str:
    hyp = hyp.assign(
        value_ci=[value_with_ci(*r) for r in zip(hyp.value, hyp.ci_low, hyp.ci_high, strict=True)]
    )
    return booktabs_table(
        hyp,
        caption="The seven candidate mechanisms: each test reads the statistic the claim was "
        "made with (the author's definition) under a pre-registered rule; the last column is "
        "the verdict when our uniform candidate-tau statistics are read instead.",
        label="tab:hypotheses",
        columns={
            "id": "",
            "statistic": "statistic",
            "value_ci": "value [CI]",
            "test_verdict": "test",
            "verdict": "verdict",
            "ours_verdict": "ours",
        },  # fmt: skip
        align="llllll",
        size="scriptsize",
    )


def scorecard_table(card: pd.DataFrame) -> str:
    card = card.assign(
        source=card["reference_traced"].map({"author_run": "run", "paper_text": "text"}),
        measured_ci=[
            value_with_ci(*r) for r in zip(card.measured, card.ci_low, card.ci_high, strict=True)
        ],
        ours_ci=[
            value_with_ci(*r)
            for r in zip(card.ours_measured, card.ours_ci_low, card.ours_ci_high, strict=True)
        ],
    )
    return booktabs_table(
        card,
        caption="Reproduction scorecard: each claim measured the way the author computed it, "
        "beside the paper's reported value (a labelled reference, never an input; source: "
        "traced to a run of the author's, or only to the paper's text) and the agreement by "
        "the stated tolerance; `ours' is our uniform candidate-tau version and its agreement.",
        label="tab:scorecard",
        columns={
            "claim": "claim",
            "measured_ci": "measured [CI]",
            "paper_reference": "paper",
            "source": "source",
            "agreement": "agreement",
            "ours_ci": "ours [CI]",
            "ours_agreement": "ours agr.",
        },  # fmt: skip
        align="p{4.4cm}llllll",
        size="scriptsize",
    )


def is_missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))
