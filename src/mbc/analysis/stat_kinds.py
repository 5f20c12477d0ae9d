"""The kinds of statistic config `statistics:` may declare: the function computing each.

A kind is a function of the rows a statistic reads (its table's rows of its experiments,
filtered by `where`, the diverged runs left out) and of its declared parameters; it returns
(value, ci_low, ci_high), n, n_censored and a note appended to the statistic's `what`.
CIs are percentile bootstraps over runs (`percentile_bootstrap`: scipy's resampling). A kind's parameters, its table and the schema of
config `statistics` are declared in `mbc.analysis.stat_schema` (no scipy: the config loads
without it); `KINDS` below pairs each with its function.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from mbc.analysis.config_sections import Bootstrap
from mbc.analysis.fits import percentile_ci
from mbc.analysis.stat_schema import PARAMS

NAN = float("nan")
NO_VALUE = (NAN, NAN, NAN)


def percentile_bootstrap(
    samples: Sequence[np.ndarray], fn: Callable, boot: Bootstrap, min_finite: float = 1
) -> tuple[float, float]:
    """The percentile CI (level boot.ci) of fn(*samples), each sample (a group of runs)
    resampled apart by `scipy.stats.bootstrap`: boot.n_boot resamples drawn from boot.seed.
    A sample of one value is held fixed (its every resample is itself); with none of two or
    more there is no CI. The interval is over the finite replicates (a resample can have
    no slope or no rho) and NaN when fewer than `min_finite` are finite."""
    samples = [np.asarray(s) for s in samples]
    free = [i for i, s in enumerate(samples) if len(s) > 1]
    if not free:
        return NAN, NAN

    def statistic(*drawn: np.ndarray) -> float:
        full = list(samples)
        for i, d in zip(free, drawn, strict=True):
            full[i] = d
        return fn(*full)

    with warnings.catch_warnings():  # non-finite replicates are left out below, not an error
        warnings.simplefilter("ignore", sps.DegenerateDataWarning)
        res = sps.bootstrap(
            [samples[i] for i in free],
            statistic,
            n_resamples=boot.n_boot,
            vectorized=False,
            confidence_level=boot.ci,
            method="percentile",
            rng=np.random.default_rng(boot.seed),
        )
    reps = np.asarray(res.bootstrap_distribution, dtype=float)
    reps = reps[np.isfinite(reps)]
    if reps.size < max(min_finite, 1):
        return NAN, NAN
    return percentile_ci(reps, boot.ci)


def bootstrap(values: np.ndarray, fn, boot: Bootstrap) -> tuple:
    """(value, ci_low, ci_high) of fn(values), percentile bootstrap over rows (= runs); a 2-D
    array resamples whole rows (paired values). No CI when under half the resamples give a
    finite value."""
    values = np.asarray(values, dtype=float)
    if values.size == 0 or not np.isfinite(values).any():
        return NO_VALUE
    v = float(fn(values))
    rows = np.arange(len(values))  # resampled as indices: scipy would split a 2-D sample
    return v, *percentile_bootstrap([rows], lambda i: fn(values[i]), boot, boot.n_boot / 2)


def ratio_of_means(a: np.ndarray, b: np.ndarray, boot: Bootstrap) -> tuple[float, float, float]:
    """mean(a) / mean(b) with a bootstrap CI resampling the two groups of runs apart."""
    if a.size == 0 or b.size == 0:
        return NO_VALUE
    ci = percentile_bootstrap([a, b], lambda x, y: x.mean() / y.mean(), boot)
    return float(a.mean() / b.mean()), *ci


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    if len(np.unique(x)) < 2 or len(np.unique(y)) < 2:
        return NAN
    return float(sps.spearmanr(x, y).statistic)


def column(rows: pd.DataFrame, name: str) -> pd.Series:
    """rows[name], or NaNs where an older table lacks the column (not measured)."""
    return rows[name] if name in rows else pd.Series(NAN, index=rows.index, dtype=float)


def y_values(rows: pd.DataFrame, st: dict) -> np.ndarray:
    """The statistic's `y` column; `bound`: a censored run's missing value is the step
    budget, a lower bound on it (a run with no value that is not censored stays missing);
    `times`: multiplied by that column (examples = batch x steps)."""
    y = column(rows, st["y"]).astype("Float64")
    if st.get("bound"):
        cens = censored_mask(rows, st, default=True)
        y = y.where(~(y.isna().to_numpy() & cens), rows["steps"].astype("Float64"))
    y = y.to_numpy(float)
    return y * rows[st["times"]].to_numpy(float) if st.get("times") else y


def censored_mask(rows: pd.DataFrame, st: dict, default: bool = False) -> np.ndarray:
    """Per row, the statistic's `censored` column; `default` for every row without one."""
    if st.get("censored"):
        return rows[st["censored"]].astype(bool).to_numpy()
    return np.full(len(rows), default)


def n_censored(rows: pd.DataFrame, st: dict) -> int:
    return int(censored_mask(rows, st).sum())


def select(rows: pd.DataFrame, where: dict | None) -> pd.DataFrame:
    """The rows meeting every condition of `where`: column -> value, a list of values (floats
    compared with np.isclose), or bounds {min, max (inclusive), above, below (strict)}."""
    for col, cond in (where or {}).items():
        v = rows[col]
        if isinstance(cond, dict):
            ops = {"min": "ge", "max": "le", "above": "gt", "below": "lt"}
            for op, bound in cond.items():
                keep = getattr(v, ops[op])(bound)  # on the rows kept so far
                rows, v = rows[keep], v[keep]
        elif isinstance(cond, list):
            num = all(isinstance(c, int | float) and not isinstance(c, bool) for c in cond)
            hit = (
                np.isclose(v.to_numpy(float)[:, None], np.array(cond, float)).any(axis=1)
                if num and len(v)
                else v.isin(cond).to_numpy()
            )
            rows = rows[hit]
        else:
            rows = rows[v == cond]
    return rows


# ---- the kinds -------------------------------------------------------------------------


def mean(rows: pd.DataFrame, st: dict, boot: Bootstrap, average=np.mean):
    """The mean of `column` over the runs (finite values only; `over_log_k`: divided by
    log K). `measured`: a boolean column; runs without it are left out, counted censored."""
    cens = n_censored(rows, st)
    if st.get("measured"):
        ok = column(rows, st["measured"]).astype("boolean").fillna(False).astype(bool)
        cens += int((~ok).sum())
        rows = rows[ok]
    v = column(rows, st["column"]).to_numpy(float)
    if st.get("over_log_k"):
        v = v / np.log(rows["k"].to_numpy(float))
    v = v[np.isfinite(v)]
    return bootstrap(v, average, boot), v.size, cens, ""


def median(rows: pd.DataFrame, st: dict, boot: Bootstrap):
    """The median of `column` over the rows (finite values only)."""
    return mean(rows, st, boot, average=np.median)


def fraction(rows: pd.DataFrame, st: dict, boot: Bootstrap):
    """The fraction of rows whose boolean `column` is `is`; `ci: false`: no bootstrap."""
    hit = (rows[st["column"]].astype(bool) == st.get("is", True)).to_numpy(float)
    if st.get("ci", True):
        vci = bootstrap(hit, np.mean, boot)
    else:
        vci = (float(hit.mean()) if hit.size else NAN, NAN, NAN)
    return vci, hit.size, n_censored(rows, st), ""


def spearman_of(rows: pd.DataFrame, st: dict, boot: Bootstrap):
    """Spearman rho of `x` with `y` over the runs with both (`abs`: |rho|), bootstrap over
    runs: its sign says which way y moves with x, its CI whether the data decide it."""
    pairs = np.column_stack([rows[st["x"]].to_numpy(float), y_values(rows, st)])
    pairs = pairs[~np.isnan(pairs).any(axis=1)]
    sign = abs if st.get("abs") else float
    vci = bootstrap(pairs, lambda p: sign(spearman(p[:, 0], p[:, 1])), boot)
    return vci, len(pairs), n_censored(rows, st), ""


def _at(values: pd.Series, which):
    """`which` of `values`: max, min, or the value itself (matched with np.isclose)."""
    if which in ("max", "min"):
        return values.max() if which == "max" else values.min()
    return which


def ratio(rows: pd.DataFrame, st: dict, boot: Bootstrap):
    """Mean y at `by` = pair[0] over mean y at `by` = pair[1] (each max, min or a value),
    the two groups of runs resampled apart. `censored_unmeasured`: a censored run leaves the
    ratio unmeasured (its y is no bound, e.g. a window that never closed). A run that is
    not censored and has no y (a window without a start, which the author's script drops)
    is left out, and the note counts it."""
    cens, by = n_censored(rows, st), st["by"]
    if rows.empty or (st["pair"][0] in ("max", "min") and rows[by].nunique() < 2):
        return NO_VALUE, len(rows), cens, ""
    if cens and st.get("censored_unmeasured"):
        return NO_VALUE, len(rows), cens, ": a censored run has no value"
    y = y_values(rows, st)
    at = rows[by].to_numpy(float)
    keep = np.isfinite(y)
    num, den = (y[keep & np.isclose(at, float(_at(rows[by], w)))] for w in st["pair"])
    dropped = int((~keep & ~censored_mask(rows, st)).sum())
    note = f": {dropped} run(s) without a value left out" if dropped else ""
    return ratio_of_means(num, den, boot), len(rows) - dropped, cens, note


def paired_ratio(rows: pd.DataFrame, st: dict, boot: Bootstrap):
    """Geometric mean over the pairs (runs alike in `pair_by`) of y at `across` = numerator
    (the first of those listed that was run) over y at `across` = denominator."""
    piv = rows.assign(_y=y_values(rows, st)).pivot_table(
        index=st["pair_by"], columns=st["across"], values="_y", aggfunc="first"
    )
    num = next((c for c in st["numerator"] if c in piv.columns), None)
    if rows.empty or num is None or st["denominator"] not in piv.columns:
        return NO_VALUE, 0, 0, ""
    logr = np.log(piv[num] / piv[st["denominator"]]).dropna().to_numpy()
    v, lo, hi = bootstrap(logr, np.mean, boot)
    return (math.exp(v), math.exp(lo), math.exp(hi)), logr.size, n_censored(rows, st), ""


def _loglog_slope(x: np.ndarray, y: np.ndarray) -> float:
    if np.unique(x).size < 2:
        return NAN
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def loglog_slope(rows: pd.DataFrame, st: dict, boot: Bootstrap):
    """Slope of a least-squares line through (log x, log(mean y + offset)), one point per
    value of x (the author's E11 beta); a censored run enters its mean with its lower bound
    `y_bound` (one without a bound is left out). CI: bootstrap of the runs within each x."""
    y = column(rows, st["y"]).astype("Float64")
    if st.get("y_bound"):
        y = y.fillna(column(rows, st["y_bound"]).astype("Float64"))
    rows = rows.assign(_y=y.to_numpy(float)).dropna(subset=["_y"])
    groups = [(float(x), g._y.to_numpy(float)) for x, g in rows.groupby(st["x"])]
    cens, offset = n_censored(rows, st), float(st.get("offset", 0.0))
    if len(groups) < 2:
        return NO_VALUE, len(rows), cens, f": fewer than 2 {st['x'].replace('_', ' ')}s"
    xs = np.array([x for x, _ in groups])

    def slope(samples: Sequence[np.ndarray]) -> float:
        return _loglog_slope(xs, np.array([v.mean() + offset for v in samples]))

    v = slope([g for _, g in groups])
    lo, hi = percentile_bootstrap([g for _, g in groups], lambda *g: slope(g), boot)
    return (v, lo, hi), len(rows), cens, ""


def nearest_fraction(summary: pd.DataFrame, st: dict, boot: Bootstrap):
    """The mean over runs of `column` at each run's checkpoint whose tau_fraction is nearest
    `at` (the collective summary's checkpoints differ per run)."""
    per_run = np.array(
        [
            float(g.loc[(g.tau_fraction - st["at"]).abs().idxmin(), st["column"]])
            for _, g in summary.groupby("run_id")
        ]
    )
    return bootstrap(per_run, np.mean, boot), per_run.size, 0, ""


def mode_at_min(rows: pd.DataFrame, st: dict, boot: Bootstrap):
    """The most common value of `column`, taken per run at its row of smallest `at_min`
    (the routing head's layer: the head whose ablation removes most delta_z). No CI."""
    n = rows.run_id.nunique() if len(rows) else 0
    if rows.empty:
        return NO_VALUE, n, 0, ""
    picked = rows.loc[rows.groupby("run_id")[st["at_min"]].idxmin(), st["column"]]
    return (float(picked.mode().iloc[0]), NAN, NAN), n, 0, ""


def runs(rows: pd.DataFrame, st: dict, boot: Bootstrap):
    """The number of distinct runs (the diverged ones included: `keeps_diverged`)."""
    first = rows.drop_duplicates("run_id")
    return (float(len(first)), NAN, NAN), len(first), n_censored(first, st), ""


# ---- the registry: each declared kind (`mbc.analysis.stat_schema.PARAMS`) and its function


@dataclass(frozen=True)
class Kind:
    fn: Callable
    table: str  # the table it reads unless the statistic names another
    keeps_diverged: bool


FUNCTIONS: dict[str, Callable] = {
    "mean": mean,
    "median": median,
    "fraction": fraction,
    "spearman": spearman_of,
    "ratio": ratio,
    "paired_ratio": paired_ratio,
    "loglog_slope": loglog_slope,
    "nearest_fraction": nearest_fraction,
    "mode_at_min": mode_at_min,
    "runs": runs,
}
KINDS: dict[str, Kind] = {
    name: Kind(FUNCTIONS[name], p.table, p.keeps_diverged) for name, p in PARAMS.items()
}
