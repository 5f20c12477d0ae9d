"""Reproduction scorecard: each headline claim (docs/method.md#scorecard) beside our measurement.

The paper's numbers live in config.yaml under `scorecard[*].paper_reference`. They are
labelled reference constants: they never enter a computation of a measured value; the
only thing done with them is the stated agreement test, and its tolerance is config too.
Agreement rules (one per row):
  abs: t        |measured - reference| <= t, or the reference lies inside our CI
  factor: f     measured and reference within a factor f of each other
  range         reference given as [low, high]: measured within [low / f, high * f]
                (f = `factor`, default 1)
  ci_overlap    our CI overlaps the paper's CI
  equal         measured == reference (categorical, e.g. the routing head's layer)
  sign          reference given as a sign (+1: grows, -1: falls) of a trend statistic
                (e.g. a Spearman rho): agree when the whole CI lies on that side of 0,
                disagree when it lies wholly on the other, inconclusive when it straddles
                0 or has no CI
  within: t     the hypotheses' rule (mbc.analysis.hypotheses.decide): agree when the whole
                CI lies inside reference +/- t, disagree when wholly outside, inconclusive
                when it straddles an edge or has no CI

Each row's `statistic` is computed the way the author computed the claim
(docs/method.md#author-statistics; `why` says how); `ours` is our uniform candidate-tau
version, shown beside it with its own agreement, so a row that agrees under one definition
only says so (`robust_to_definition`).
`paper_reference.traced` says whether the paper's number is traced to a run of the
author's (`author_run`) or only to the paper's text (`paper_text`); `note` records where
the paper's wording and the author's numbers disagree; `explanation` ({cause, text}) why a
row that disagrees, or agrees under one definition only, does so. A claim of our own (a new
experiment's, say) is `traced: ours`: its reference is the value or sign we predicted, and
the same rules decide it. Such a claim has an `id`; robustness.csv lists E15's
(mbc.analysis.robustness.robustness_table).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence

import pandas as pd

from mbc.analysis.config_sections import ScorecardRow
from mbc.analysis.hypotheses import decide

COLUMNS = [
    "claim",
    "statistic",
    "measured",
    "ci_low",
    "ci_high",
    "n",
    "n_diverged",
    "paper_reference",
    "tolerance",
    "agreement",
    "ours_statistic",
    "ours_measured",
    "ours_ci_low",
    "ours_ci_high",
    "ours_agreement",
    "robust_to_definition",
    "reference_traced",
    "why",
    "note",
    "id",
    "cause",
    "explanation",
]
# added after a measured report was committed (measured/): a reader of a committed
# scorecard.csv (mbc.readme_results) takes them where they are, and config's otherwise
LATER_COLUMNS = ("cause", "explanation")
# the hypotheses' words for a claim of our own decided by `within`, as the scorecard says them
WITHIN_AGREEMENT = {"supported": "agree", "falsified": "disagree", "inconclusive": "inconclusive"}


def _finite(*vs) -> bool:
    return all(v is not None and isinstance(v, int | float) and math.isfinite(v) for v in vs)


def agreement(measured, lo, hi, ref: dict, rule: dict) -> str:
    """'agree', 'disagree', 'inconclusive' (a sign rule whose CI straddles 0) or
    'not measured'."""
    if not _finite(measured):
        return "not measured"
    if "within" in rule:
        verdict = decide(measured, lo, hi, "within", rule["within"], ref["value"])
        return WITHIN_AGREEMENT.get(verdict, "inconclusive")  # no CI: inconclusive
    if rule.get("sign"):
        if not _finite(lo, hi):
            return "inconclusive"
        side = ref["sign"]
        if min(lo * side, hi * side) > 0:
            return "agree"
        return "disagree" if max(lo * side, hi * side) < 0 else "inconclusive"
    inside = _finite(lo, hi) and "value" in ref and lo <= ref["value"] <= hi
    if "abs" in rule:
        ok = abs(measured - ref["value"]) <= rule["abs"] or inside
    elif "range" in rule or "range" in ref:
        f = rule.get("factor", 1.0)
        low, high = ref["range"]
        ok = low / f <= measured <= high * f
    elif "factor" in rule:
        if measured <= 0 or ref["value"] <= 0:
            return "disagree"
        ok = max(measured / ref["value"], ref["value"] / measured) <= rule["factor"]
    elif rule.get("ci_overlap"):
        if not _finite(lo, hi):
            return "not measured"
        plo, phi = ref["ci"]
        ok = lo <= phi and plo <= hi
    elif rule.get("equal"):
        ok = measured == ref["value"]
    else:
        raise ValueError(f"unknown agreement rule {rule}")
    return "agree" if ok else "disagree"


def reference_text(ref: dict) -> str:
    """A paper reference as the scorecard prints it: a value (and CI), a range or a sign."""
    if "sign" in ref:
        return "> 0 (grows)" if ref["sign"] > 0 else "< 0 (falls)"
    if "range" in ref:
        return f"{ref['range'][0]:g}-{ref['range'][1]:g}"
    s = f"{ref['value']:g}"
    if "ci" in ref:
        s += f" [{ref['ci'][0]:g}, {ref['ci'][1]:g}]"
    return s


def tolerance_text(rule: dict, ref: dict | None = None) -> str:
    """An agreement rule as the scorecard prints it, in `agreement`'s order (`ref`: the
    reference it is applied to, which says whether a factor widens a range)."""
    if "within" in rule:
        return f"whole CI within +/- {rule['within']:g}"
    if rule.get("sign"):
        return "whole CI on the sign's side of 0"
    if "abs" in rule:
        return f"abs {rule['abs']:g} or reference in CI"
    if "range" in rule or (ref is not None and "range" in ref):
        f = rule.get("factor", 1.0)
        return "inside the range" if f == 1 else f"inside the range widened x{f:g}"
    if "factor" in rule:
        return f"within x{rule['factor']:g}"
    if rule.get("ci_overlap"):
        return "CIs overlap"
    if rule.get("equal"):
        return "equal"
    return "inside range"


def _matches(statistics: pd.DataFrame, pattern: str) -> list[str]:
    return [n for n in statistics.name if fnmatch.fnmatchcase(n, pattern)] or [pattern]


def _measured(statistics: pd.DataFrame, name: str) -> tuple[float, float, float, int, int]:
    """(value, ci_low, ci_high, n, n_diverged: the diverged runs it left out)."""
    s = statistics.loc[statistics.name == name]
    if not len(s):
        return math.nan, math.nan, math.nan, 0, 0
    nd = s.n_diverged.iloc[0] if "n_diverged" in s else 0
    nd = int(nd) if pd.notna(nd) else 0
    return s.value.iloc[0], s.ci_low.iloc[0], s.ci_high.iloc[0], int(s.n.iloc[0]), nd


def scorecard(rows_cfg: Sequence[ScorecardRow], statistics: pd.DataFrame) -> pd.DataFrame:
    """One row per config `scorecard` entry (per statistic its glob matches)."""
    out = []
    for row in rows_cfg:
        ref, rule = row.reference(), row.rule()
        names = _matches(statistics, row.statistic)
        ours = _matches(statistics, row.statistic if row.ours is None else row.ours)
        if len(ours) != len(names):  # a glob on one side only: compare against the first
            ours = [ours[0]] * len(names)
        for n, o in zip(names, ours, strict=True):
            m, lo, hi, cnt, nd = _measured(statistics, n)
            om, olo, ohi, _, _ = _measured(statistics, o)
            agree, ours_agree = agreement(m, lo, hi, ref, rule), agreement(om, olo, ohi, ref, rule)
            out.append(
                {
                    "claim": row.claim,
                    "statistic": n,
                    "measured": m,
                    "ci_low": lo,
                    "ci_high": hi,
                    "n": cnt,
                    "n_diverged": nd,
                    "paper_reference": reference_text(ref),
                    "tolerance": tolerance_text(rule, ref),
                    "agreement": agree,
                    "ours_statistic": o,
                    "ours_measured": om,
                    "ours_ci_low": olo,
                    "ours_ci_high": ohi,
                    "ours_agreement": ours_agree,
                    "robust_to_definition": agree == ours_agree,
                    "reference_traced": ref["traced"],
                    "why": row.why,
                    "note": ref.get("note", ""),
                    "id": row.id or "",
                    "cause": row.explanation.get("cause", ""),
                    "explanation": row.explanation.get("text", ""),
                }
            )
    return pd.DataFrame(out, columns=COLUMNS)
