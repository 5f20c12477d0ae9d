"""Reproduction scorecard: each headline claim (spec section 6) beside our measurement.

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
"""

from __future__ import annotations

import fnmatch
import math

import pandas as pd

COLUMNS = [
    "claim", "statistic", "measured", "ci_low", "ci_high", "n", "paper_reference",
    "tolerance", "agreement",
]  # fmt: skip


def _finite(*vs) -> bool:
    return all(v is not None and isinstance(v, int | float) and math.isfinite(v) for v in vs)


def agreement(measured, lo, hi, ref: dict, rule: dict) -> str:
    """'agree', 'disagree' or 'n/a' (nothing measured)."""
    if not _finite(measured):
        return "not measured"
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


def _describe(ref: dict) -> str:
    if "range" in ref:
        return f"{ref['range'][0]:g}-{ref['range'][1]:g}"
    s = f"{ref['value']:g}"
    if "ci" in ref:
        s += f" [{ref['ci'][0]:g}, {ref['ci'][1]:g}]"
    return s


def _tolerance(rule: dict) -> str:
    if "abs" in rule:
        return f"abs {rule['abs']:g} or reference in CI"
    if "factor" in rule:
        return f"within x{rule['factor']:g}"
    if rule.get("ci_overlap"):
        return "CIs overlap"
    if rule.get("equal"):
        return "equal"
    return "inside range"


def scorecard(rows_cfg: list[dict], statistics: pd.DataFrame) -> pd.DataFrame:
    out = []
    for row in rows_cfg:
        names = [n for n in statistics.name if fnmatch.fnmatchcase(n, row["statistic"])]
        for n in names or [row["statistic"]]:
            s = statistics.loc[statistics.name == n]
            m, lo, hi, cnt = (
                (s.value.iloc[0], s.ci_low.iloc[0], s.ci_high.iloc[0], int(s.n.iloc[0]))
                if len(s) else (math.nan, math.nan, math.nan, 0)
            )  # fmt: skip
            out.append({
                "claim": row["claim"], "statistic": n, "measured": m, "ci_low": lo, "ci_high": hi,
                "n": cnt, "paper_reference": _describe(row["paper_reference"]),
                "tolerance": _tolerance(row["agree"]),
                "agreement": agreement(m, lo, hi, row["paper_reference"], row["agree"]),
            })  # fmt: skip
    return pd.DataFrame(out, columns=COLUMNS)
