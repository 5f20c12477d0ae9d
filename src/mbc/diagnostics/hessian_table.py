"""hessian.csv, the table of E10 (docs/method.md#hessian): one row per (checkpoint, method).

No torch here: the fits, statistics and figures read the table through :func:`read_hessian`
without loading the estimators (`mbc.diagnostics.hessian`).

Tables written before the `method` column had one row per checkpoint, Lanczos in the plain
columns and the power iteration in columns suffixed `_power`. :func:`long_table` is the one
place that converts them, so an outdir measured then is read without recomputing its
estimates.
"""

from __future__ import annotations

import os

import pandas as pd

from mbc.core.artifacts import read_csv_checked

# the checkpoint a row estimates
CHECKPOINT_COLUMNS = ["run_id", "k", "tau", "step", "tau_fraction", "phase"]
# one estimator's result (`mbc.diagnostics.spectrum.SpectrumEstimate`); n_iter_max and
# n_iter_min are the steps each end took where the ends are iterated apart (power
# iteration), empty where one iteration gives both (Lanczos)
ESTIMATE_COLUMNS = [
    "lambda_max", "lambda_min", "residual_max", "residual_min", "converged_max",
    "converged_min", "anisotropy", "n_iter_max", "n_iter_min",
]  # fmt: skip
HESSIAN_COLUMNS = [*CHECKPOINT_COLUMNS, "method", *ESTIMATE_COLUMNS]

# the wide table's column sets: Lanczos unsuffixed (it had no step counts), power `_power`
_WIDE = {"lanczos": "", "power": "_power"}


def long_table(df: pd.DataFrame) -> pd.DataFrame:
    """hessian.csv in `HESSIAN_COLUMNS`: a long table as it is, a wide one (no `method`
    column) as one row per checkpoint and method, checkpoint by checkpoint in the order
    Lanczos, power (the order the estimates ran in), an empty one as no rows."""
    if "method" in df.columns:
        return df
    if not len(df.columns):
        return pd.DataFrame(columns=HESSIAN_COLUMNS)
    parts = []
    for method, suffix in _WIDE.items():
        part = df[CHECKPOINT_COLUMNS].copy()
        part["method"] = method
        for col in ESTIMATE_COLUMNS:
            wide = col + suffix
            part[col] = df[wide] if wide in df.columns else float("nan")
        parts.append(part)
    # row i of every part is checkpoint i: a stable sort on it interleaves the methods
    out = pd.concat(parts).sort_index(kind="stable")
    return out.reset_index(drop=True)[HESSIAN_COLUMNS]


def read_hessian(path: str | os.PathLike) -> pd.DataFrame:
    """A hessian.csv (a run's or the stacked table), long (`long_table`)."""
    return long_table(read_csv_checked(path))


# aggregated table -> its reader, for a table whose files may be in an older layout (read
# through its converter); any other table: read_csv_checked
READERS = {"hessian": read_hessian}


def of_method(df: pd.DataFrame, method: str) -> pd.DataFrame:
    """The rows of one estimator."""
    return df[df["method"] == method]
