"""Shared by every figure: the style, sizes and labels, and the table helpers (typed tau
and metrics rows, fitted rows read from `fits`, formatting). The registry is
`mbc.paper.figures.registry`; the drawing helpers `mbc.paper.figures.drawing`."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from mbc.core.journal import METRIC_COLUMNS
from mbc.diagnostics.summary import NUMBER_COLUMNS

STYLE = Path(__file__).parent / "mbc.mplstyle"
DPI = 150
CENSORED_LABEL = "censored (tau > budget)"
# a diverged run (docs/method.md#divergence): a cross (x) at the step it was stopped
DIVERGED_LABEL = "diverged (stopped)"
DIVERGED_STYLE = dict(marker="x", color="C3", zorder=4)
ONE_COL = 3.4  # inches: one-column figure width
TWO_COL = 7.0  # inches: figures with two or three side-by-side panels


FIT_NUMERIC = (
    "exponent",
    "ci_low",
    "ci_high",
    "prefactor",
    "r2",
    "n",
    "n_censored",
    "ci_level",
    "n_boot",
)


def numeric_cols(df: pd.DataFrame, cols: Iterable[str]) -> pd.DataFrame:
    """A copy with `cols` numeric (bad values -> NaN); absent columns are added as NaN."""
    df = df.copy()
    for c in cols:
        df[c] = pd.to_numeric(df[c], errors="coerce") if c in df.columns else np.nan
    return df


def as_bool(s: pd.Series) -> pd.Series:
    """CSV booleans (True/False, true/false, 1/0, strings) -> bool; missing -> False."""
    if s.dtype == bool:
        return s
    return s.map(lambda v: str(v).strip().lower() in {"true", "1", "1.0", "yes"}).astype(bool)


def text_col(df: pd.DataFrame, col: str) -> pd.Series:
    return df[col].astype(str) if col in df.columns else pd.Series("", index=df.index)


def flag_col(df: pd.DataFrame, col: str) -> np.ndarray:
    """A boolean column as an array; False throughout where an older table lacks it."""
    return as_bool(df[col]).to_numpy() if col in df.columns else np.zeros(len(df), bool)


def tau_rows(tau: pd.DataFrame, experiments: Iterable[str] | None = None) -> pd.DataFrame:
    """Rows of the tau table (of `experiments`, when given) with typed columns.

    `censored` is True where the table says so or tau is missing; such a run is drawn at its
    step budget (`steps`).
    """
    df = numeric_cols(tau, NUMBER_COLUMNS)
    for c in ("run_id", "experiment", "task", "model", "init", "sharing"):
        df[c] = text_col(df, c)
    if experiments is not None:
        df = df[df["experiment"].isin(list(experiments))]
    flag = as_bool(df["censored"]) if "censored" in df.columns else False
    df["diverged"] = as_bool(df["diverged"]) if "diverged" in df.columns else False
    df["censored"] = (flag | df["tau"].isna()) & ~df["diverged"]  # diverged: never censored
    return df.reset_index(drop=True)


def metrics_rows(metrics: pd.DataFrame) -> pd.DataFrame:
    df = numeric_cols(metrics, METRIC_COLUMNS)
    df["run_id"] = text_col(df, "run_id")
    return df


def one_seed_per(df: pd.DataFrame, by: str | list[str]) -> pd.DataFrame:
    """The lowest-seed row of each value of `by` (a representative curve per setting)."""
    if df.empty:
        return df
    by = [by] if isinstance(by, str) else by
    return df.sort_values([*by, "seed", "run_id"]).drop_duplicates(by).reset_index(drop=True)


def fit_row(fits: pd.DataFrame, name: str) -> pd.Series | None:
    if fits is None or fits.empty or "name" not in fits.columns:
        return None
    df = numeric_cols(fits, FIT_NUMERIC)
    rows = df[df["name"].astype(str) == name]
    return None if rows.empty else rows.iloc[0]


def experiment_names(experiments: Iterable[str]) -> str:
    """A role's experiments in a label: E1/E2."""
    return "/".join(experiments)


def fmt_value(v: float) -> str:
    """A number for a label: integers without a decimal point, others in %g."""
    if v is None or not np.isfinite(v):
        return "n/a"
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def all_finite(*arrays: np.ndarray) -> np.ndarray:
    out = np.ones(len(arrays[0]), dtype=bool)
    for a in arrays:
        out &= np.isfinite(np.asarray(a, dtype=float))
    return out
