"""How the analysis treats diverged runs (docs/method.md#divergence), config `diverged:`.

A diverged run (`status` diverged in tau.csv) is never censored data: it did not wait on the
plateau for its budget, it stopped being a measurement. Declared policies:
  exclude  every statistic, fit and per-run table leaves it out, and says how many it left
           out (`n_diverged` in statistics.csv, fits.csv, threshold_sensitivity.csv,
           init_scale.csv, hypotheses.csv, robustness.csv, scorecard.csv)
  fail     the first table that would read one stops the workflow, naming the runs
"""

from __future__ import annotations

import pandas as pd

POLICIES = ("exclude", "fail")


def diverged_ids(tau: pd.DataFrame) -> set[str]:
    """Run ids tau.csv marks diverged (none in a table written before the column)."""
    if "diverged" not in tau.columns or tau.empty:
        return set()
    flag = tau["diverged"].map(lambda v: str(v).strip().lower() in {"true", "1", "1.0"})
    return set(tau.loc[flag.astype(bool), "run_id"])


def check(tau: pd.DataFrame, policy: str, what: str) -> set[str]:
    """The diverged run ids `what` will leave out; under `fail`, stop if there are any."""
    if policy not in POLICIES:
        raise ValueError(f"diverged = {policy!r}: expected one of {POLICIES}")
    ids = diverged_ids(tau)
    if ids and policy == "fail":
        raise RuntimeError(
            f"{what}: {len(ids)} run(s) diverged and config `diverged: fail` stops here: "
            + ", ".join(sorted(ids))
        )
    return ids


def drop(rows: pd.DataFrame, ids: set[str]) -> tuple[pd.DataFrame, int]:
    """(rows without the diverged runs `ids`, how many distinct runs were left out)."""
    if not ids or rows.empty:
        return rows, 0
    out = rows["run_id"].isin(ids)
    return rows[~out], int(rows.loc[out, "run_id"].nunique())
