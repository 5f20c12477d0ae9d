"""The seven candidate mechanisms (docs/method.md#hypotheses) as computed verdicts.

Each hypothesis lists tests written in config.yaml before any data is seen: a statistic
(a name in statistics.csv, `*` globs allowed), the direction the mechanism predicts and
a threshold. One test on a statistic with CI [lo, hi]:
  supported     the whole CI lies on the predicted side of the threshold
  falsified     the whole CI lies on the other side
  inconclusive  the CI straddles the threshold
  not enough data  no value, or no CI (fewer than two independent runs)
A hypothesis is falsified if any of its tests is, supported if all are, not enough data
if all are, and inconclusive otherwise.

A test reads the statistic its claim was made with (the author's definition,
docs/method.md#author-statistics); `ours` names our uniform candidate-tau version of it,
decided by the same rule and combined into `ours_verdict`: where the two verdicts differ,
the verdict depends on the definition. `paper_verdict` is the paper's own verdict (a
labelled reference from config, printed beside ours, never decided on), with config's
explanation of a difference (`cause`, `explanation`).
"""

from __future__ import annotations

import fnmatch
import math

import pandas as pd

from mbc.analysis.config_sections import Hypotheses, HypothesisTest

COLUMNS = [
    "id",
    "mechanism",
    "prediction",
    "statistic",
    "value",
    "ci_low",
    "ci_high",
    "rule",
    "verdict",
]
VERDICTS = ("falsified", "supported", "inconclusive", "not enough data")


def decide(
    value: float, lo: float, hi: float, direction: str, threshold: float, center: float = 0.0
) -> str:
    """greater / less: the CI against `threshold`; within (E15's robustness statements):
    the CI against the band center +/- threshold (supported inside it, falsified when the
    CI lies wholly outside it)."""
    if any(v is None or not math.isfinite(v) for v in (value, lo, hi)):
        return "not enough data"
    if direction == "within":
        band_lo, band_hi = center - threshold, center + threshold
        inside, outside = band_lo < lo and hi < band_hi, hi < band_lo or lo > band_hi
        return "supported" if inside else "falsified" if outside else "inconclusive"
    above, below = lo > threshold, hi < threshold
    if direction == "greater":
        return "supported" if above else "falsified" if below else "inconclusive"
    if direction == "less":
        return "supported" if below else "falsified" if above else "inconclusive"
    raise ValueError(f"direction must be 'greater', 'less' or 'within', got {direction!r}")


def combine(verdicts: list[str]) -> str:
    if not verdicts or all(v == "not enough data" for v in verdicts):
        return "not enough data"
    if "falsified" in verdicts:
        return "falsified"
    if all(v == "supported" for v in verdicts):
        return "supported"
    return "inconclusive"


def decide_pattern(pattern: str, t: HypothesisTest, statistics: pd.DataFrame) -> list[tuple]:
    """(name, value, lo, hi, verdict) of every statistic matching `pattern` under test t
    (its direction, threshold and, for `within`, center); one "not enough data" row when
    none matches. The robustness statements (mbc.analysis.robustness) are decided the same way."""
    names = [n for n in statistics["name"] if fnmatch.fnmatchcase(n, pattern)]
    if not names:
        return [(pattern, math.nan, math.nan, math.nan, "not enough data")]
    out = []
    for n in names:
        s = statistics.loc[statistics.name == n].iloc[0]
        verdict = decide(s.value, s.ci_low, s.ci_high, t.direction, t.threshold, t.center)
        out.append((n, s.value, s.ci_low, s.ci_high, verdict))
    return out


def rule_text(t: HypothesisTest) -> str:
    """The decision rule of test t, as the tables print it."""
    if t.direction == "within":
        c, w = t.center, t.threshold
        return f"supported if CI within {c:g} +/- {w:g}; falsified if CI wholly outside"
    sign = ">" if t.direction == "greater" else "<"
    return f"supported if CI {sign} {t.threshold:g}; falsified if CI on the other side"


def _describe(parts: list[tuple]) -> str:
    return "; ".join(f"{n} = {v:.3g} [{lo:.3g}, {hi:.3g}]: {d}" for n, v, lo, hi, d in parts)


def evaluate_hypotheses(hypotheses: Hypotheses, statistics: pd.DataFrame) -> pd.DataFrame:
    """hypotheses.csv: one row per (hypothesis, matched statistic) plus the combined verdict
    and, beside it, the verdict of our uniform-definition statistics (`ours`)."""
    rows = []
    for h in hypotheses.items:
        parts, ours = [], []
        dual = any(t.ours is not None and t.ours != t.statistic for t in h.tests)
        for t in h.tests:
            parts += [(*p, t) for p in decide_pattern(t.statistic, t, statistics)]
            ours += decide_pattern(t.ours or t.statistic, t, statistics)
        overall = combine([p[4] for p in parts])
        ours_verdict = combine([p[4] for p in ours])
        for n, value, lo, hi, v, t in parts:
            rows.append(
                {
                    "id": h.id,
                    "mechanism": h.mechanism,
                    "prediction": h.prediction,
                    "statistic": n,
                    "value": value,
                    "ci_low": lo,
                    "ci_high": hi,
                    "rule": rule_text(t),
                    "verdict": overall,
                    "test_verdict": v,
                    "why": t.why,
                    "ours_verdict": ours_verdict,
                    "ours": _describe(ours),
                    "robust_to_definition": ours_verdict == overall,
                    "dual": dual,
                    "paper_verdict": h.paper_verdict.get("verdict", ""),
                    "paper_says": h.paper_verdict.get("says", ""),
                    "cause": h.explanation.get("cause", ""),
                    "explanation": h.explanation.get("text", ""),
                }
            )
    extra = [
        "test_verdict",
        "why",
        "ours_verdict",
        "ours",
        "robust_to_definition",
        "dual",
        "paper_verdict",
        "paper_says",
        "cause",
        "explanation",
    ]
    table = pd.DataFrame(rows, columns=[*COLUMNS, *extra])
    return with_diverged(table, statistics)


def with_diverged(table: pd.DataFrame, statistics: pd.DataFrame) -> pd.DataFrame:
    """`table` with `n_diverged` of each row's statistic: the diverged runs it left out
    (config `diverged`, mbc.analysis.diverged), so that every verdict says how it treated
    them (0 for a statistic that matched nothing)."""
    nd = statistics.set_index("name")["n_diverged"] if "n_diverged" in statistics else None
    by = "statistic" if "statistic" in table else "name"
    table = table.copy()
    table["n_diverged"] = (
        0 if nd is None else table[by].map(nd).fillna(0).astype(int) if len(table) else []
    )
    return table


def verdicts(table: pd.DataFrame) -> dict[str, str]:
    return table.drop_duplicates("id").set_index("id")["verdict"].to_dict()
