"""Tests of mbc.analysis.fits: power-law fits (OLS / Tobit) and the unit bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mbc.analysis import fits
from mbc.analysis.fits import PowerLawFit, fit_power_law
from mbc.analysis.hypotheses import decide


def verdict(fit: PowerLawFit, threshold: float = 0.0) -> str:
    """The hypotheses' rule on the exponent (mbc.analysis.hypotheses.decide, `greater`): inconclusive
    when the CI holds `threshold`, supported above it, not enough data without a CI."""
    return decide(fit.exponent, fit.ci_low, fit.ci_high, "greater", threshold)


X_VALUES = np.array([1000.0, 2000.0, 5000.0, 10000.0, 20000.0])  # e.g. dataset sizes D


def planted(exponent, prefactor=3.0, sigma=0.05, x_values=X_VALUES, seeds=3, rng_seed=0):
    """Rows (x, tau, unit id) of tau = prefactor * x**exponent * lognormal(0, sigma)."""
    rng = np.random.default_rng(rng_seed)
    x = np.repeat(np.asarray(x_values, dtype=float), seeds)
    tau = prefactor * x**exponent * np.exp(sigma * rng.standard_normal(x.size))
    units = [f"x{xi:g}-s{i % seeds}" for i, xi in enumerate(x)]
    return x, tau, units


def censor(x, tau, budget):
    """Right-censor at the step budget: y := budget where tau > budget."""
    cens = tau > budget
    return np.where(cens, budget, tau), cens


# --------------------------------------------------------------------------------------------
# OLS path


def test_planted_power_law_is_recovered():
    """Fixed draw. With only 15 units the nominal 95% percentile CI covers the truth in about
    88% of draws of this design (measured over 200 draws), so the draw is pinned."""
    x, tau, units = planted(1.2, rng_seed=1)
    fit = fit_power_law(x, tau, units=units, name="E3", x_name="D", seed=1)
    assert fit.method == "ols"
    assert abs(fit.exponent - 1.2) < 0.05
    assert fit.ci_low <= 1.2 <= fit.ci_high
    assert fit.ci_low < fit.exponent < fit.ci_high
    assert fit.r2 > 0.95
    assert fit.prefactor == pytest.approx(3.0, rel=0.5)
    assert (fit.n, fit.n_censored, fit.n_boot, fit.ci_level) == (15, 0, 1000, 0.95)
    assert verdict(fit, 1.2) == "inconclusive"  # the CI holds the planted exponent
    assert verdict(fit, 0.0) == "supported"


def test_zero_exponent_ci_contains_zero():
    x, tau, units = planted(0.0, prefactor=5000.0, sigma=0.1, rng_seed=3)
    fit = fit_power_law(x, tau, units=units, seed=2)
    assert fit.ci_low < 0.0 < fit.ci_high
    assert verdict(fit) == "inconclusive"
    assert abs(fit.exponent) < 0.1


def test_exact_data_gives_exact_exponent():
    x = X_VALUES
    tau = 7.0 * x**1.19
    fit = fit_power_law(x, tau, seed=0, n_boot=200)
    assert abs(fit.exponent - 1.19) < 1e-9
    assert abs(fit.r2 - 1.0) < 1e-9
    assert fit.prefactor == pytest.approx(7.0, rel=1e-9)
    # every valid resample of exact data gives the same slope
    assert abs(fit.ci_low - 1.19) < 1e-9 and abs(fit.ci_high - 1.19) < 1e-9


def test_ols_matches_numpy_polyfit():
    x, tau, _ = planted(0.8, sigma=0.3, rng_seed=5)
    fit = fit_power_law(x, tau, seed=0, n_boot=0)
    slope, intercept = np.polyfit(np.log(x), np.log(tau), 1)
    assert fit.exponent == pytest.approx(slope, abs=1e-12)
    assert fit.prefactor == pytest.approx(math.exp(intercept), rel=1e-10)
    assert math.isnan(fit.ci_low) and math.isnan(fit.ci_high) and fit.n_boot == 0
    assert verdict(fit) == "not enough data"


# --------------------------------------------------------------------------------------------
# censoring / Tobit


CENS_X = np.logspace(1, 3, 8)
CENS_BUDGET = 3.0 * 300.0**1.2  # crosses the planted line at x = 300


def _censored_dataset(rng_seed):
    x, tau, units = planted(1.2, sigma=0.5, x_values=CENS_X, seeds=8, rng_seed=rng_seed)
    y, cens = censor(x, tau, CENS_BUDGET)
    return x, tau, y, cens, units


def _ols_uncensored(x, y, cens):
    return np.polyfit(np.log(x[~cens]), np.log(y[~cens]), 1)[0]


def test_tobit_recovers_exponent_under_censoring():
    x, tau, y, cens, units = _censored_dataset(rng_seed=4)  # pinned draw; see next test
    assert 10 < cens.sum() < 40  # real censoring, and every censored y is the budget
    assert np.all(y[cens] == CENS_BUDGET)
    fit = fit_power_law(x, y, censored=cens, units=units, seed=0, n_boot=100)
    assert fit.method == "tobit"
    assert (fit.n, fit.n_censored) == (int((~cens).sum()), int(cens.sum()))
    assert abs(fit.exponent - 1.2) < 0.15
    assert fit.ci_low <= 1.2 <= fit.ci_high
    assert fit.n_boot >= 50
    naive = _ols_uncensored(x, y, cens)
    assert abs(fit.exponent - 1.2) < abs(naive - 1.2)
    # treating censored rows as observed taus is biased too, in the same direction
    as_observed = fit_power_law(x, y, seed=0, n_boot=0)
    assert as_observed.method == "ols" and as_observed.exponent < fit.exponent


def test_tobit_is_unbiased_where_ols_on_uncensored_is_not():
    """Averaged over replicates (estimator bias, not one draw's noise)."""
    tobit, naive = [], []
    for rng_seed in range(20):
        x, _, y, cens, _ = _censored_dataset(rng_seed=100 + rng_seed)
        tobit.append(fit_power_law(x, y, censored=cens, seed=0, n_boot=0).exponent)
        naive.append(_ols_uncensored(x, y, cens))
    assert abs(np.mean(tobit) - 1.2) < 0.03
    assert np.mean(naive) < 1.2 - 0.05
    assert abs(np.mean(tobit) - 1.2) < abs(np.mean(naive) - 1.2)


def test_tobit_without_censoring_equals_ols():
    """The censored-normal likelihood with nothing censored is the normal one: MLE = OLS."""
    x, tau, _ = planted(1.1, sigma=0.2, rng_seed=7)
    lx, ly = np.log(x), np.log(tau)
    theta = fits._tobit(lx, ly, np.zeros(x.size, bool), np.ones(x.size), None)
    slope, intercept = np.polyfit(lx, ly, 1)
    resid = ly - (intercept + slope * lx)
    assert theta[0] == pytest.approx(slope, abs=1e-7)
    assert theta[1] == pytest.approx(intercept, abs=1e-6)
    assert theta[2] == pytest.approx(0.5 * math.log(np.mean(resid**2)), abs=1e-6)


def test_tobit_gradient_and_hessian_match_finite_differences():
    rng = np.random.default_rng(0)
    lx, ly = rng.normal(size=20), rng.normal(size=20) + 2.0
    cens, w = rng.random(20) < 0.4, rng.integers(1, 3, 20).astype(float)
    theta, eps = np.array([1.1, 2.0, -0.5]), 1e-6

    def f_and_g(t):
        return fits._TobitObjective(lx, ly, cens, w).fun(t)

    obj = fits._TobitObjective(lx, ly, cens, w)
    _, g = obj.fun(theta)
    h = obj.hess(theta)
    for j, e in enumerate(np.eye(3) * eps):
        (fp, gp), (fm, gm) = f_and_g(theta + e), f_and_g(theta - e)
        assert g[j] == pytest.approx((fp - fm) / (2 * eps), rel=1e-6)
        np.testing.assert_allclose(h[:, j], (gp - gm) / (2 * eps), rtol=1e-5, atol=1e-5)


def test_tobit_noise_free_censored_data_is_exact():
    x = np.repeat(CENS_X, 2)
    y, cens = censor(x, 3.0 * x**1.2, CENS_BUDGET)
    fit = fit_power_law(x, y, censored=cens, seed=0, n_boot=100)
    assert fit.method == "tobit" and fit.n_censored == int(cens.sum()) > 0
    assert abs(fit.exponent - 1.2) < 1e-9 and abs(fit.r2 - 1.0) < 1e-9
    assert abs(fit.ci_low - 1.2) < 1e-9 and abs(fit.ci_high - 1.2) < 1e-9


# --------------------------------------------------------------------------------------------
# bootstrap over units


def test_duplicated_unit_rows_count_as_rows_but_resample_together():
    """Chosen semantics: n counts rows (one row = one run in the pipeline); units only group
    rows for the bootstrap. Duplicating every row inside its own unit doubles n, leaves the
    point estimate unchanged and, with the same seed, gives the identical CI (each resample of
    units is the same fit with every row weighted twice). Declaring the duplicates independent
    units instead narrows the CI: pseudo-replication."""
    x, tau, units = planted(1.2, sigma=0.1, rng_seed=11)
    base = fit_power_law(x, tau, units=units, seed=4)
    x2, tau2, units2 = np.tile(x, 2), np.tile(tau, 2), units + units
    dup = fit_power_law(x2, tau2, units=units2, seed=4)
    assert (base.n, dup.n) == (15, 30)
    assert dup.exponent == pytest.approx(base.exponent, abs=1e-12)
    assert dup.ci_low == pytest.approx(base.ci_low, abs=1e-12)
    assert dup.ci_high == pytest.approx(base.ci_high, abs=1e-12)
    indep = fit_power_law(x2, tau2, seed=4)  # units=None: every row its own unit
    assert indep.n == 30
    assert (indep.ci_high - indep.ci_low) < 0.85 * (base.ci_high - base.ci_low)


def test_bootstrap_is_seeded():
    x, tau, units = planted(1.2, rng_seed=2)
    a = fit_power_law(x, tau, units=units, seed=123)
    b = fit_power_law(x, tau, units=units, seed=123)
    c = fit_power_law(x, tau, units=units, seed=124)
    assert (a.ci_low, a.ci_high) == (b.ci_low, b.ci_high)
    assert a.to_row() == b.to_row()
    assert (a.ci_low, a.ci_high) != (c.ci_low, c.ci_high)
    assert abs(a.ci_low - c.ci_low) < 0.02 and abs(a.ci_high - c.ci_high) < 0.02
    assert a.exponent == c.exponent  # the point estimate does not depend on the seed


def _expected_valid(seed, n_boot):
    """Valid resamples of two units (one per x value): both units drawn. Mirrors the draw
    ``default_rng(seed).integers(0, n_units, size=(n_boot, n_units))`` of fit_power_law."""
    draws = np.random.default_rng(seed).integers(0, 2, size=(n_boot, 2))
    return int(np.sum(draws[:, 0] != draws[:, 1]))


@pytest.mark.parametrize("seed", [0, 4])  # 93 and 107 valid resamples out of 200
def test_resamples_with_one_distinct_x_are_skipped(seed):
    # two units (a: four rows at x=10, b: one row at x=100): a resample drawing one unit
    # twice has a single distinct x and is skipped; CI only if >= 50% of resamples are valid
    x = np.array([10.0, 10.0, 10.0, 10.0, 100.0])
    tau = np.array([20.0, 21.0, 19.0, 20.0, 300.0])
    fit = fit_power_law(x, tau, units=["a", "a", "a", "a", "b"], seed=seed, n_boot=200)
    expected = _expected_valid(seed, 200)
    assert expected == {0: 93, 4: 107}[seed]  # one seed for each branch below
    assert fit.method == "ols" and fit.n == 5
    assert fit.n_boot == expected
    if expected < 100:
        assert math.isnan(fit.ci_low) and math.isnan(fit.ci_high)
        assert verdict(fit) == "not enough data"
    else:
        # every valid resample holds both units: the slope is the full-data slope
        assert fit.ci_low == pytest.approx(fit.exponent) == pytest.approx(fit.ci_high)


# --------------------------------------------------------------------------------------------
# insufficient data and bad input


def test_insufficient_data_returns_nan_fit():
    fit = fit_power_law([1000.0, 2000.0], [50.0, 90.0], seed=0, name="tiny", x_name="D")
    assert fit.method == "insufficient"
    assert all(math.isnan(v) for v in (fit.exponent, fit.ci_low, fit.ci_high, fit.prefactor))
    assert math.isnan(fit.r2)
    assert (fit.n, fit.n_censored, fit.n_boot, fit.name, fit.x_name) == (2, 0, 0, "tiny", "D")
    # enough rows but one distinct x
    one_x = fit_power_law([5.0] * 4, [10.0, 11.0, 12.0, 13.0], seed=0)
    assert one_x.method == "insufficient" and one_x.n == 4
    # censored rows do not count towards min_points, but are reported
    cens = fit_power_law(
        [1.0, 2.0, 3.0, 4.0], [5.0, 9.0, 100.0, 100.0], censored=[0, 0, 1, 1], seed=0
    )
    assert (cens.method, cens.n, cens.n_censored) == ("insufficient", 2, 2)
    row = cens.to_row()
    # every field but the bootstrap replicates (not a table column)
    assert set(row) == {f.name for f in PowerLawFit.__dataclass_fields__.values()} - {"replicates"}
    assert row["method"] == "insufficient"


@pytest.mark.parametrize(
    ("x", "y", "needle"),
    [
        ([1.0, 2.0, 0.0, 4.0], [1.0, 2.0, 3.0, 4.0], "x[2] = 0.0"),
        ([1.0, 2.0, 3.0, 4.0], [1.0, -2.5, 3.0, 4.0], "y[1] = -2.5"),
        ([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, float("nan")], "y[3] = nan"),
        ([1.0, float("inf"), 3.0, 4.0], [1.0, 2.0, 3.0, 4.0], "x[1] = inf"),
    ],
)
def test_bad_input_raises_with_value(x, y, needle):
    with pytest.raises(ValueError, match=r"must be finite and > 0") as info:
        fit_power_law(x, y, seed=0)
    assert needle in str(info.value)


def test_mismatched_lengths_raise():
    with pytest.raises(ValueError, match="3 entries"):
        fit_power_law([1.0, 2.0, 3.0], [1.0, 2.0], seed=0)
    with pytest.raises(ValueError, match="censored has 2"):
        fit_power_law([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], censored=[True, False], seed=0)
    with pytest.raises(ValueError, match="units has 1"):
        fit_power_law([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], units=["a"], seed=0)
