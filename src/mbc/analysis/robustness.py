"""E15, beyond the paper: is the duration law robust to the initialisation scale?
(docs/method.md#e15)

Three tables, all declared under config `robustness:`:
- init_scale.csv: one row per init std of the sweep experiment (runs, censored runs, tau
  and plateau height / log K with bootstrap CIs over runs); the tau-vs-std power law
  itself is a fit in fits.csv (Tobit when runs are censored).
- init_comparison.csv: each configured statistic under the default init beside the same
  statistic under the alternative init (`*` globs pair by what they match: `_at_d2000`).
- robustness.csv: the pre-registered statements, the scorecard's claims of our own
  (`traced: ours`, config `scorecard`), decided by the hypotheses' rule
  (mbc.analysis.hypotheses.decide, `within`), in their own table, never mixed into H1-H7.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from mbc.analysis import diverged as div
from mbc.analysis.config_sections import Bootstrap, HypothesisTest, ScorecardRow
from mbc.analysis.hypotheses import combine, decide_pattern, rule_text, with_diverged
from mbc.analysis.stat_kinds import bootstrap

INIT_SCALE_COLUMNS = [
    "experiment",
    "init",
    "init_std",
    "init_scale",
    "n_runs",
    "n_censored",
    "n_diverged",
    "tau_mean",
    "tau_ci_low",
    "tau_ci_high",
    "height_over_log_k",
    "height_ci_low",
    "height_ci_high",
]
COMPARISON_COLUMNS = [
    "quantity",
    "match",
    "default_statistic",
    "default",
    "default_ci_low",
    "default_ci_high",
    "alternative_statistic",
    "alternative",
    "alternative_ci_low",
    "alternative_ci_high",
]
ROBUSTNESS_COLUMNS = [
    "id",
    "statement",
    "statistic",
    "value",
    "ci_low",
    "ci_high",
    "rule",
    "test_verdict",
    "verdict",
    "n_diverged",
]


def init_scale_table(
    tau: pd.DataFrame, experiment: str, boot: Bootstrap, diverged: str = "exclude"
) -> pd.DataFrame:
    """One row per init std of `experiment`: tau over the runs that crossed (the censored
    ones are counted; the fit in fits.csv treats them as censored) and the plateau height.
    Diverged runs: as config `diverged` says (left out, counted in n_diverged)."""
    e = tau[tau.experiment == experiment].drop_duplicates("run_id")
    ids = div.check(tau, diverged, "init_scale")
    out = []
    for (scheme, std), g in sorted(e.groupby(["init", "init_std"]), key=lambda kv: kv[0][1]):
        g, nd = div.drop(g, ids)
        crossed = g.loc[~g.censored.astype(bool), "tau"].to_numpy(float)
        h = g.height_over_log_k.dropna().to_numpy(float)
        t, h_ci = bootstrap(crossed, np.mean, boot), bootstrap(h, np.mean, boot)
        out.append(
            {
                "experiment": experiment,
                "init": scheme,
                "init_std": float(std),
                "init_scale": float(g.init_scale.iloc[0]),
                "n_runs": len(g),
                "n_censored": int(g.censored.astype(bool).sum()),
                "n_diverged": nd,
                "tau_mean": t[0],
                "tau_ci_low": t[1],
                "tau_ci_high": t[2],
                "height_over_log_k": h_ci[0],
                "height_ci_low": h_ci[1],
                "height_ci_high": h_ci[2],
            }
        )
    return pd.DataFrame(out, columns=INIT_SCALE_COLUMNS)


def _matches(pattern: str, names: pd.Series) -> dict[str, str]:
    """statistic name -> what the pattern's `*` matched ('' without a glob)."""
    rx = re.compile(
        "^" + "(.*)".join(re.escape(p) for p in pattern.split("*")) + "$"
    )  # one group per `*`
    out = {}
    for n in names:
        m = rx.match(n)
        if m:
            out["/".join(m.groups())] = n
    return out


def _value(stats: pd.DataFrame, name: str | None) -> tuple[float, float, float]:
    if name is None:
        return (math.nan,) * 3
    s = stats.loc[stats.name == name].iloc[0]
    return float(s.value), float(s.ci_low), float(s.ci_high)


def comparison_table(compare: list[dict], stats: pd.DataFrame) -> pd.DataFrame:
    """The default init's statistic beside the alternative's, row by row of `compare`."""
    out = []
    for row in compare:
        d, a = _matches(row["default"], stats.name), _matches(row["alternative"], stats.name)
        for key in sorted(d.keys() | a.keys()) or [""]:
            dv, av = _value(stats, d.get(key)), _value(stats, a.get(key))
            out.append(
                {
                    "quantity": row["quantity"],
                    "match": key,
                    "default_statistic": d.get(key, row["default"]),
                    "default": dv[0],
                    "default_ci_low": dv[1],
                    "default_ci_high": dv[2],
                    "alternative_statistic": a.get(key, row["alternative"]),
                    "alternative": av[0],
                    "alternative_ci_low": av[1],
                    "alternative_ci_high": av[2],
                }
            )
    return pd.DataFrame(out, columns=COMPARISON_COLUMNS)


def statement_test(row: ScorecardRow) -> HypothesisTest:
    """A claim of our own as a hypothesis test: `within` its reference +/- the rule's
    width (the scorecard's `within`), or the sign's side of 0 (`sign`)."""
    ref, rule = row.reference(), row.rule()
    if "within" in rule:
        return HypothesisTest(row.statistic, "within", rule["within"], center=ref["value"])
    if rule.get("sign"):
        return HypothesisTest(row.statistic, "greater" if ref["sign"] > 0 else "less", 0.0)
    raise ValueError(f"{row.id}: a claim of our own is decided by `within` or `sign`")


def robustness_table(rows: Sequence[ScorecardRow], stats: pd.DataFrame) -> pd.DataFrame:
    """One row per (claim of our own, matched statistic); `verdict` combines a claim's rows."""
    out = []
    for row in rows:
        t = statement_test(row)
        parts = decide_pattern(row.statistic, t, stats)
        overall = combine([p[4] for p in parts])
        for n, v, lo, hi, verdict in parts:
            out.append(
                {
                    "id": row.id,
                    "statement": row.claim,
                    "statistic": n,
                    "value": v,
                    "ci_low": lo,
                    "ci_high": hi,
                    "rule": rule_text(t),
                    "test_verdict": verdict,
                    "verdict": overall,
                }
            )
    return with_diverged(pd.DataFrame(out, columns=ROBUSTNESS_COLUMNS[:-1]), stats)
