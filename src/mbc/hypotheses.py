"""The seven candidate mechanisms (spec section 5) as computed verdicts.

Each hypothesis lists tests written in config.yaml before any data is seen: a statistic
(a name in statistics.csv, `*` globs allowed), the direction the mechanism predicts and
a threshold. One test on a statistic with CI [lo, hi]:
  supported     the whole CI lies on the predicted side of the threshold
  falsified     the whole CI lies on the other side
  inconclusive  the CI straddles the threshold
  not enough data  no value, or no CI (fewer than two independent runs)
A hypothesis is falsified if any of its tests is, supported if all are, not enough data
if all are, and inconclusive otherwise.
"""

from __future__ import annotations

import fnmatch
import math

import pandas as pd

COLUMNS = [
    "id", "mechanism", "prediction", "statistic", "value", "ci_low", "ci_high", "rule", "verdict",
]  # fmt: skip
VERDICTS = ("falsified", "supported", "inconclusive", "not enough data")


def decide(value: float, lo: float, hi: float, direction: str, threshold: float) -> str:
    if any(v is None or not math.isfinite(v) for v in (value, lo, hi)):
        return "not enough data"
    above, below = lo > threshold, hi < threshold
    if direction == "greater":
        return "supported" if above else "falsified" if below else "inconclusive"
    if direction == "less":
        return "supported" if below else "falsified" if above else "inconclusive"
    raise ValueError(f"direction must be 'greater' or 'less', got {direction!r}")


def combine(verdicts: list[str]) -> str:
    if not verdicts or all(v == "not enough data" for v in verdicts):
        return "not enough data"
    if "falsified" in verdicts:
        return "falsified"
    if all(v == "supported" for v in verdicts):
        return "supported"
    return "inconclusive"


def evaluate_hypotheses(hypotheses: dict, statistics: pd.DataFrame) -> pd.DataFrame:
    """hypotheses.csv: one row per (hypothesis, matched statistic) plus the combined verdict."""
    rows = []
    for hid, h in hypotheses.items():
        verdicts, parts = [], []
        for t in h["tests"]:
            names = [n for n in statistics["name"] if fnmatch.fnmatchcase(n, t["statistic"])]
            if not names:
                verdicts.append("not enough data")
                parts.append((t["statistic"], math.nan, math.nan, math.nan, t, "not enough data"))
            for n in names:
                s = statistics.loc[statistics.name == n].iloc[0]
                v = decide(s.value, s.ci_low, s.ci_high, t["direction"], t["threshold"])
                verdicts.append(v)
                parts.append((n, s.value, s.ci_low, s.ci_high, t, v))
        overall = combine(verdicts)
        for n, value, lo, hi, t, v in parts:
            sign = ">" if t["direction"] == "greater" else "<"
            rows.append({
                "id": hid, "mechanism": h["mechanism"], "prediction": h["prediction"],
                "statistic": n, "value": value, "ci_low": lo, "ci_high": hi,
                "rule": f"supported if CI {sign} {t['threshold']:g}; falsified if CI on the other side",
                "verdict": overall, "test_verdict": v,
            })  # fmt: skip
    return pd.DataFrame(rows, columns=[*COLUMNS, "test_verdict"])


def verdicts(table: pd.DataFrame) -> dict[str, str]:
    return table.drop_duplicates("id").set_index("id")["verdict"].to_dict()
