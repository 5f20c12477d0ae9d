"""Power-law fits of waiting times, with right-censoring and a unit bootstrap.

Conventions (docs/method.md#fits, #waiting-time):

- A waiting time ``tau`` is measured in optimiser steps: the first *evaluated* step at which the
  candidate loss falls below ``threshold * log K`` (nats; :mod:`mbc.core.crossing`). A run that never
  crosses within its step budget is *censored*: its tau is unknown and only known to exceed the
  budget.
- A power law ``tau = prefactor * x ** exponent`` is fitted on the natural-log scale,
  ``log tau = log prefactor + exponent * log x``. ``x`` is whatever is swept (dataset size D, K,
  learning rate, batch size, sharing factor, ...), in its own units; ``prefactor`` is in steps
  per ``x_unit ** exponent``.
- Without censored points the fit is ordinary least squares on ``(log x, log tau)`` and ``r2`` is
  the coefficient of determination on the log scale. With censored points the fit is a Tobit
  (right-censored normal) maximum-likelihood regression of ``log tau`` on ``log x``; a censored
  row contributes ``P(log tau > log budget)`` to the likelihood, so it is never dropped and never
  treated as an observed tau. ``r2`` is then computed for the uncensored rows under the fitted
  line (it can be negative).
- The confidence interval of the exponent is a percentile bootstrap over independent *units*
  (e.g. run ids): unit ids are resampled with replacement and all rows of a drawn unit enter the
  resample together (as many times as the unit was drawn).

Counting semantics: ``n`` and ``n_censored`` count *rows* (uncensored and censored). In the
pipeline one row is one run, so they count runs. If a unit has several rows (e.g. a duplicated
row), each row counts and each row weighs in the point estimate; ``units`` only change which
rows travel together in the bootstrap, and hence the width of the CI.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize, special

__all__ = [
    "PowerLawFit",
    "exponent_difference",
    "fit_power_law",
]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_MIN_VALID_FRACTION = 0.5  # fewer valid bootstrap resamples than this fraction -> NaN CI


@dataclass(frozen=True)
class PowerLawFit:
    """Result of :func:`fit_power_law` for ``tau = prefactor * x ** exponent``.

    Attributes:
        name: label of the fit (e.g. ``"E3 tau(D)"``).
        x_name: name of the regressor (e.g. ``"D"``).
        exponent: fitted exponent (slope of log tau on log x; dimensionless).
        ci_low, ci_high: percentile-bootstrap CI of the exponent at level ``ci_level``
            (NaN when there are too few valid resamples or ``n_boot == 0``).
        prefactor: ``exp(intercept)``, in steps per ``x ** exponent``.
        r2: coefficient of determination on the natural-log scale (uncensored rows only when
            ``method == "tobit"``; NaN if the uncensored log taus have zero variance).
        n: number of rows with an observed (uncensored) tau.
        n_censored: number of censored rows (tau > step budget).
        method: ``"ols"``, ``"tobit"`` or ``"insufficient"``.
        ci_level: nominal CI level, e.g. 0.95.
        n_boot: number of *valid* bootstrap resamples the CI was computed from (0 if none).
        replicates: the exponent of every bootstrap resample (NaN where a resample was not
            valid); not a table column. A difference of two fits' exponents takes its CI
            from these (:func:`exponent_difference`).
    """

    name: str
    x_name: str
    exponent: float
    ci_low: float
    ci_high: float
    prefactor: float
    r2: float
    n: int
    n_censored: int
    method: str
    ci_level: float
    n_boot: int
    replicates: np.ndarray = dataclasses.field(
        default_factory=lambda: np.empty(0), repr=False, compare=False
    )

    def to_row(self) -> dict[str, Any]:
        """A flat dict (one table row) of all fields but the replicates."""
        row = dataclasses.asdict(self)
        del row["replicates"]
        return row


def percentile_ci(replicates: np.ndarray, level: float) -> tuple[float, float]:
    """The central `level` percentile interval of bootstrap replicates (finite ones, as the
    caller keeps them): every CI of the analysis."""
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(replicates, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def exponent_difference(a: PowerLawFit, b: PowerLawFit, name: str) -> PowerLawFit:
    """a's exponent minus b's, with a percentile CI from independent bootstraps of the two
    (their runs are disjoint, so the resamples pair at random): replicate i of a minus
    replicate i of b, over the resamples valid in both. Needs the same n_boot and
    different bootstrap seeds for the two fits."""
    nan = math.nan
    ra, rb = np.asarray(a.replicates, float), np.asarray(b.replicates, float)
    d = ra - rb if ra.size == rb.size else np.empty(0)
    good = d[np.isfinite(d)]
    n_boot = max(a.replicates.size, 1)
    lo = hi = nan
    if good.size and good.size >= _MIN_VALID_FRACTION * n_boot:
        lo, hi = percentile_ci(good, a.ci_level)
    return PowerLawFit(
        name=name,
        x_name=a.x_name,
        exponent=a.exponent - b.exponent,
        ci_low=lo,
        ci_high=hi,
        prefactor=nan,
        r2=nan,
        n=a.n + b.n,
        n_censored=a.n_censored + b.n_censored,
        method="difference",
        ci_level=a.ci_level,
        n_boot=int(good.size),
    )


# --------------------------------------------------------------------------------------------
# validation


def _as_positive_finite(values: Any, label: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{label} must be one-dimensional, got shape {arr.shape}")
    bad = ~np.isfinite(arr) | (arr <= 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{label} must be finite and > 0 for a log-log fit; {label}[{i}] = {float(arr[i])!r}"
        )
    return arr


def _unit_codes(units: Sequence[Hashable] | np.ndarray | None, n_rows: int) -> np.ndarray:
    """Integer code per row (0..n_units-1, in order of first appearance)."""
    if units is None:
        return np.arange(n_rows)
    seq = units.tolist() if isinstance(units, np.ndarray) else list(units)
    if len(seq) != n_rows:
        raise ValueError(f"units has {len(seq)} entries, x has {n_rows}")
    mapping: dict[Hashable, int] = {}
    return np.array([mapping.setdefault(u, len(mapping)) for u in seq], dtype=int)


# --------------------------------------------------------------------------------------------
# estimators (weighted, so a bootstrap resample is a weight vector over rows)


def _ols(lx: np.ndarray, ly: np.ndarray, w: np.ndarray | None = None) -> tuple[float, float]:
    """Weighted least squares of ly on lx; returns (slope, intercept)."""
    if w is None:
        w = np.ones_like(lx)
    sw = w.sum()
    mx = (w @ lx) / sw
    my = (w @ ly) / sw
    dx = lx - mx
    slope = float((w * dx) @ (ly - my) / ((w * dx) @ dx))
    return slope, float(my - slope * mx)


def _ols_batch(lx: np.ndarray, ly: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Slopes of weighted least squares for each row of ``weights`` (n_boot x n_rows)."""
    lx = lx - lx.mean()
    ly = ly - ly.mean()
    sw = weights.sum(axis=1)
    mx = weights @ lx / sw
    my = weights @ ly / sw
    sxx = weights @ (lx * lx) - sw * mx * mx
    sxy = weights @ (lx * ly) - sw * mx * my
    with np.errstate(divide="ignore", invalid="ignore"):
        return sxy / sxx


class _TobitObjective:
    """Weighted negative log-likelihood of the right-censored normal model on log scales.

    Parameters ``theta = (exponent, intercept, log sigma)``; ``ly`` holds log tau for
    uncensored rows and log budget for censored rows. An uncensored row contributes
    ``-log N(ly; mu, sigma)``, a censored row ``-log P(log tau > ly) = -log Phi((mu - ly) /
    sigma)``, with ``mu = intercept + exponent * lx``. Value, gradient and Hessian are
    analytic and cached per ``theta`` (scipy asks for them in separate calls).
    """

    def __init__(self, lx: np.ndarray, ly: np.ndarray, cens: np.ndarray, w: np.ndarray):
        self.lx, self.ly, self.cens, self.w = lx, ly, cens, w
        self.obs = ~cens
        self._theta: np.ndarray | None = None

    def _eval(self, theta: np.ndarray) -> None:
        if self._theta is not None and np.array_equal(theta, self._theta):
            return
        b, a, ls = (float(t) for t in theta)
        ls = min(max(ls, -700.0), 700.0)
        s = math.exp(ls)
        lx, w, obs = self.lx, self.w, self.obs
        z = (self.ly - (a + b * lx)) / s
        u = -z  # (mu - log budget) / sigma, used for censored rows
        log_cdf = special.log_ndtr(u)
        lam = np.exp(-0.5 * u * u - _HALF_LOG_2PI - log_cdf)  # inverse Mills ratio, stable
        k = lam * (u + lam)  # -d^2 log Phi(u) / du^2, in (0, 1)
        nll_i = np.where(obs, 0.5 * z * z + _HALF_LOG_2PI + ls, -log_cdf)
        d_mu = np.where(obs, -z / s, -lam / s)
        d_ls = np.where(obs, 1.0 - z * z, lam * u)
        h_mm = np.where(obs, 1.0 / (s * s), k / (s * s))
        h_ml = np.where(obs, 2.0 * z / s, lam * (1.0 - u * (u + lam)) / s)
        h_ll = np.where(obs, 2.0 * z * z, lam * u * (u * (u + lam) - 1.0))
        wm, wl = w * h_mm, w * h_ml
        self.f = float(w @ nll_i)
        self.g = np.array([w @ (d_mu * lx), w @ d_mu, w @ d_ls])
        self.h = np.array(
            [
                [wm @ (lx * lx), wm @ lx, wl @ lx],
                [wm @ lx, wm.sum(), wl.sum()],
                [wl @ lx, wl.sum(), w @ h_ll],
            ]
        )
        self._theta = np.array(theta, dtype=float)

    def fun(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        self._eval(theta)
        return self.f, self.g

    def hess(self, theta: np.ndarray) -> np.ndarray:
        self._eval(theta)
        return self.h


def _tobit(
    lx: np.ndarray, ly: np.ndarray, cens: np.ndarray, w: np.ndarray, init: np.ndarray | None
) -> np.ndarray | None:
    """Tobit MLE ``(exponent, intercept, log sigma)``; None if the optimiser did not converge.

    ``scipy.optimize.minimize(method="trust-exact")`` with the analytic gradient and Hessian,
    on centred log x (decorrelates slope and intercept; the returned intercept is at
    log x = 0), started from ``init`` or, if None, from OLS on the uncensored rows. Rows with
    zero weight (units not drawn in a bootstrap resample) are dropped first.

    Noise-free limit: if the uncensored rows lie exactly on a line (log-scale residuals
    < 1e-10) that predicts at least the budget at every censored row, the likelihood grows
    without bound as sigma -> 0 along that line, so that line is the MLE (log sigma = -inf).
    """
    keep = w > 0
    lx, ly, cens, w = lx[keep], ly[keep], cens[keep], w[keep]
    obs = ~cens
    b0, a0 = _ols(lx[obs], ly[obs], w[obs])
    resid = ly[obs] - (a0 + b0 * lx[obs])
    if np.max(np.abs(resid)) < 1e-10 and np.all(a0 + b0 * lx[cens] >= ly[cens] - 1e-10):
        return np.array([b0, a0, -math.inf])
    if init is None:
        var = float(w[obs] @ (resid * resid) / w[obs].sum())
        init = np.array([b0, a0, 0.5 * math.log(max(var, 1e-12))])
    m = float(w @ lx / w.sum())
    obj = _TobitObjective(lx - m, ly, cens, w)
    res = optimize.minimize(
        obj.fun,
        np.array([init[0], init[1] + init[0] * m, init[2]]),
        jac=True,
        hess=obj.hess,
        method="trust-exact",
        options={"gtol": 1e-8, "maxiter": 200},
    )
    theta = np.asarray(res.x, dtype=float)
    if not np.all(np.isfinite(theta)):
        return None
    if not res.success:
        # accept a stop at the optimum that only missed gtol through round-off: a negligible
        # Newton step at a positive-definite Hessian
        f, g = obj.fun(theta)
        h = obj.hess(theta)
        try:
            step = np.linalg.solve(h, g)
        except np.linalg.LinAlgError:
            return None
        if np.any(np.linalg.eigvalsh(h) <= 0) or np.max(np.abs(step)) > 1e-7:
            return None
    return np.array([theta[0], theta[1] - theta[0] * m, theta[2]])


def _r2(lx: np.ndarray, ly: np.ndarray, slope: float, intercept: float) -> float:
    ss_tot = float(np.sum((ly - ly.mean()) ** 2))
    if ss_tot == 0.0:
        return math.nan
    ss_res = float(np.sum((ly - (intercept + slope * lx)) ** 2))
    return 1.0 - ss_res / ss_tot


def _n_distinct(mask: np.ndarray, x_code: np.ndarray, n_x: int) -> np.ndarray:
    """Distinct x values among rows with ``mask`` True, for each row of ``mask`` (2-D)."""
    onehot = np.zeros((x_code.size, n_x))
    onehot[np.arange(x_code.size), x_code] = 1.0
    return ((mask.astype(float) @ onehot) > 0).sum(axis=1)


# --------------------------------------------------------------------------------------------
# public API


def fit_power_law(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    *,
    censored: Sequence[bool] | np.ndarray | None = None,
    units: Sequence[Hashable] | np.ndarray | None = None,
    name: str = "",
    x_name: str = "x",
    n_boot: int = 1000,
    ci: float = 0.95,
    seed: int,
    min_points: int = 3,
) -> PowerLawFit:
    """Fit ``y = prefactor * x ** exponent`` on natural-log scales, with a unit bootstrap CI.

    Args:
        x: regressor per row (D, K, lr, batch size, ...), > 0 and finite.
        y: waiting time tau in optimiser steps per row; for a censored row, the censoring
            bound (the step budget: tau is only known to exceed it). > 0 and finite.
        censored: per-row flag, True where the run never crossed within its budget. None means
            nothing is censored. With any censored row the fit is a Tobit MLE.
        units: per-row id of the independent unit (e.g. run id); the bootstrap resamples unit
            ids with replacement and keeps all rows of a unit together. None: each row is its
            own unit.
        name, x_name: labels copied to the result.
        n_boot: number of bootstrap resamples (0: no CI). Resamples with fewer than 2 distinct
            x values (among uncensored rows for Tobit), or on which the Tobit optimiser does not
            converge, are skipped; if fewer than half are valid the CI is NaN. OLS resamples
            are vectorised (1000 in a few ms); a Tobit resample is one MLE (~5 ms each).
        ci: CI level in (0, 1) (percentile interval).
        seed: seed of ``numpy.random.default_rng`` for the bootstrap.
        min_points: fewer uncensored rows than this, or fewer than 2 distinct x values among
            uncensored rows, gives ``method == "insufficient"`` with NaN numbers (no exception).

    Returns:
        A :class:`PowerLawFit`; ``n`` / ``n_censored`` count rows (see module docstring).

    Raises:
        ValueError: on x or y <= 0 or non-finite (the message names the value), mismatched
            lengths, or invalid ``ci`` / ``n_boot``.
        RuntimeError: if the Tobit MLE on the full data does not converge (never seen in tests;
            loud rather than a silently wrong exponent).
    """
    xa = _as_positive_finite(x, "x")
    ya = _as_positive_finite(y, "y")
    if xa.size != ya.size:
        raise ValueError(f"x has {xa.size} entries, y has {ya.size}")
    if censored is None:
        cens = np.zeros(xa.size, dtype=bool)
    else:
        cens = np.asarray(censored, dtype=bool).ravel()
        if cens.size != xa.size:
            raise ValueError(f"censored has {cens.size} entries, x has {xa.size}")
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci must be in (0, 1), got {ci!r}")
    if int(n_boot) != n_boot or n_boot < 0:
        raise ValueError(f"n_boot must be a non-negative integer, got {n_boot!r}")
    n_boot = int(n_boot)
    unit = _unit_codes(units, xa.size)

    n_obs = int((~cens).sum())
    n_cens = int(cens.sum())
    nan = math.nan

    def result(
        method: str,
        b: float,
        a: float,
        r2: float,
        lo: float,
        hi: float,
        nb: int,
        reps: np.ndarray | None = None,
    ):
        return PowerLawFit(
            name=name,
            x_name=x_name,
            exponent=b,
            ci_low=lo,
            ci_high=hi,
            prefactor=math.exp(a) if math.isfinite(a) else nan,
            r2=r2,
            n=n_obs,
            n_censored=n_cens,
            method=method,
            ci_level=float(ci),
            n_boot=nb,
            replicates=np.empty(0) if reps is None else reps,
        )

    if n_obs < min_points or np.unique(xa[~cens]).size < 2:
        return result("insufficient", nan, nan, nan, nan, nan, 0)

    lx, ly = np.log(xa), np.log(ya)
    obs = ~cens
    if n_cens == 0:
        method = "ols"
        b, a = _ols(lx, ly)
    else:
        method = "tobit"
        ones = np.ones(xa.size)
        theta = _tobit(lx, ly, cens, ones, None)
        if theta is None:
            raise RuntimeError(f"Tobit fit {name!r} did not converge")
        b, a = float(theta[0]), float(theta[1])
    r2 = _r2(lx[obs], ly[obs], b, a)

    lo = hi = nan
    n_valid = 0
    slopes = np.empty(0)
    if n_boot > 0:
        rng = np.random.default_rng(seed)
        n_units = int(unit.max()) + 1
        draws = rng.integers(0, n_units, size=(n_boot, n_units))
        counts = np.zeros((n_boot, n_units))
        np.add.at(counts, (np.arange(n_boot)[:, None], draws), 1.0)
        weights = counts[:, unit]  # n_boot x n_rows: how often each row enters each resample
        _, x_code = np.unique(xa, return_inverse=True)
        n_x = int(x_code.max()) + 1
        valid = _n_distinct((weights > 0) & obs[None, :], x_code, n_x) >= 2
        slopes = np.full(n_boot, nan)
        if method == "ols":
            slopes[valid] = _ols_batch(lx, ly, weights[valid])
        else:
            init = theta if np.all(np.isfinite(theta)) else None
            for i in np.flatnonzero(valid):
                th = _tobit(lx, ly, cens, weights[i], init)
                if th is not None:
                    slopes[i] = th[0]
        good = slopes[np.isfinite(slopes)]
        n_valid = int(good.size)
        if n_valid > 0 and n_valid >= _MIN_VALID_FRACTION * n_boot:
            lo, hi = percentile_ci(good, ci)
    return result(method, b, a, r2, lo, hi, n_valid, slopes)
