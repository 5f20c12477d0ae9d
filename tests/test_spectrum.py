"""Extreme-eigenvalue estimators against dense eigendecompositions of known spectra."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from mbc.diagnostics import spectrum
from mbc.diagnostics.spectrum import PowerEstimate, SpectrumEstimate, extremes_by_power, lanczos

LAMBDA_MAX, LAMBDA_MIN = 50.0, -0.07  # anisotropy ~714, as on the paper's plateau


def sym_matrix(eigs: np.ndarray, seed: int) -> torch.Tensor:
    """Q diag(eigs) Q^T with Q Haar-random orthogonal: a symmetric matrix with spectrum eigs."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((len(eigs), len(eigs))))
    return torch.from_numpy((q * eigs) @ q.T)


def plateau_matrix(n: int = 200, seed: int = 0) -> torch.Tensor:
    """Tiny negative lambda_min, a bulk in [0.5, 5], a few outliers up to lambda_max = 50."""
    rng = np.random.default_rng(seed + 100)
    eigs = np.concatenate([[LAMBDA_MIN], rng.uniform(0.5, 5.0, n - 4), [12.0, 25.0, LAMBDA_MAX]])
    return sym_matrix(eigs, seed)


def gapped_matrix(n: int = 50, seed: int = 0) -> torch.Tensor:
    """Clear gaps at both ends: 0.2 | bulk in [1, 5] | 6, 10 (power-iteration ratios <= 0.92)."""
    rng = np.random.default_rng(seed + 200)
    eigs = np.concatenate([[0.2], rng.uniform(1.0, 5.0, n - 3), [6.0, 10.0]])
    return sym_matrix(eigs, seed)


def matvec_of(a: torch.Tensor):
    return lambda v: a @ v


def exact(a: torch.Tensor) -> np.ndarray:
    return np.linalg.eigvalsh(a.numpy())


def test_lanczos_matches_eigvalsh_on_plateau_spectrum():
    a = plateau_matrix()
    true = exact(a)
    est = lanczos(matvec_of(a), a.shape[0], n_iter=60, seed=0)
    assert est.method == "lanczos" and est.n_iter == 60
    assert est.lambda_max == pytest.approx(true[-1], abs=1e-9 * LAMBDA_MAX)
    assert est.lambda_min == pytest.approx(true[0], abs=1e-9 * LAMBDA_MAX)
    assert est.lambda_min < 0  # the sign is resolved: residual << |lambda_min|
    assert est.residual_min < 1e-6 * abs(est.lambda_min)
    assert est.relative_residual_max < 1e-10 and est.relative_residual_min < 1e-10
    assert est.converged_max and est.converged_min
    assert est.anisotropy == pytest.approx(LAMBDA_MAX / abs(LAMBDA_MIN), rel=1e-8)
    assert 500 <= est.anisotropy <= 1000


def test_lanczos_residuals_are_true_residuals():
    a = plateau_matrix(n=80, seed=3)
    est = lanczos(matvec_of(a), 80, n_iter=8, seed=1)
    # For symmetric A some eigenvalue lies within the residual of each Ritz value.
    true = exact(a)
    assert np.min(np.abs(true - est.lambda_max)) <= est.residual_max * (1 + 1e-12)
    assert np.min(np.abs(true - est.lambda_min)) <= est.residual_min * (1 + 1e-12)


def test_lanczos_too_few_iterations_not_converged():
    a = plateau_matrix()
    true = exact(a)
    est = lanczos(matvec_of(a), a.shape[0], n_iter=5, seed=0)
    assert not est.converged_min
    assert est.relative_residual_min > 10 * 1e-3
    # Ritz values lie inside the spectrum: an unconverged lambda_min is an over-estimate.
    assert true[0] <= est.lambda_min <= est.lambda_max <= true[-1] + 1e-12
    assert est.lambda_min - true[0] > 0.1  # far off, and the flag says so
    # The same run with a loose tolerance calls it converged: the flag follows tol.
    loose = lanczos(matvec_of(a), a.shape[0], n_iter=5, seed=0, tol=0.5)
    assert loose.converged_min and loose.lambda_min == est.lambda_min


def test_lanczos_caps_n_iter_at_n_and_is_exact():
    a = sym_matrix(np.array([-3.0, -1.0, 0.5, 2.0, 4.0, 7.0, 9.0, 11.0]), seed=5)
    est = lanczos(matvec_of(a), 8, n_iter=50, seed=0)
    assert est.n_iter == 8
    assert est.lambda_max == pytest.approx(11.0, abs=1e-12)
    assert est.lambda_min == pytest.approx(-3.0, abs=1e-12)
    assert est.converged_max and est.converged_min


def test_lanczos_stops_on_invariant_subspace():
    # Three distinct eigenvalues: the Krylov space has dimension 3, so Lanczos must stop there.
    eigs = np.array([-0.5] * 10 + [1.0] * 20 + [4.0] * 10)
    a = sym_matrix(eigs, seed=2)
    est = lanczos(matvec_of(a), 40, n_iter=30, seed=0)
    assert est.n_iter == 3
    assert est.lambda_max == pytest.approx(4.0, abs=1e-12)
    assert est.lambda_min == pytest.approx(-0.5, abs=1e-12)
    assert est.residual_max < 1e-12 and est.residual_min < 1e-12


def test_lanczos_zero_operator():
    est = lanczos(lambda v: torch.zeros_like(v), 10, n_iter=5, seed=0)
    assert est.lambda_max == 0.0 and est.lambda_min == 0.0
    assert est.converged_max and est.converged_min and est.n_iter == 1
    assert est.anisotropy == math.inf


def test_lanczos_float32():
    a = plateau_matrix(n=100, seed=4)
    true = exact(a)
    a32 = a.float()
    est = lanczos(matvec_of(a32), 100, n_iter=60, seed=0, dtype=torch.float32)
    assert est.lambda_max == pytest.approx(true[-1], abs=1e-5 * LAMBDA_MAX)
    assert est.lambda_min == pytest.approx(true[0], abs=1e-5 * LAMBDA_MAX)
    assert est.converged_max and est.converged_min


def test_lanczos_seed_reproducible_and_seed_independent():
    a = plateau_matrix()
    mv, n = matvec_of(a), a.shape[0]
    first = lanczos(mv, n, n_iter=60, seed=7)
    assert lanczos(mv, n, n_iter=60, seed=7) == first  # bit-identical
    other = lanczos(mv, n, n_iter=60, seed=8)
    assert other != first
    assert other.lambda_max == pytest.approx(first.lambda_max, abs=1e-9 * LAMBDA_MAX)
    assert other.lambda_min == pytest.approx(first.lambda_min, abs=1e-9 * LAMBDA_MAX)


def test_estimators_leave_global_rng_alone():
    a = gapped_matrix()
    state = torch.get_rng_state()
    lanczos(matvec_of(a), 50, n_iter=10, seed=0)
    extremes_by_power(matvec_of(a), 50, n_iter=10, seed=0)
    assert torch.equal(torch.get_rng_state(), state)


def power_end(a: torch.Tensor, *, n_iter: int, seed: int, shift: float = 0.0, tol: float = 1e-3):
    """One end of extremes_by_power: its power iteration (shifted by `shift`) from the first
    start vector its seeded generator draws."""
    gen = torch.Generator().manual_seed(seed)
    v = spectrum._start_vector(gen, a.shape[0], torch.float64, "cpu")
    return spectrum._power(matvec_of(a), v, n_iter=n_iter, shift=shift, tol=tol)


def test_power_iteration_dominant_and_shifted():
    a = gapped_matrix()
    true = exact(a)
    top = power_end(a, n_iter=2000, seed=0, tol=1e-8)
    assert isinstance(top, PowerEstimate)
    assert top.converged and top.n_iter < 2000  # stopped early on the residual test
    assert top.eigenvalue == pytest.approx(true[-1], abs=1e-10)
    assert top.residual <= 1e-8 * abs(top.eigenvalue)
    bottom = power_end(a, n_iter=2000, seed=0, shift=true[-1], tol=1e-8)
    assert bottom.converged
    assert bottom.eigenvalue == pytest.approx(true[0], abs=1e-10)
    assert bottom.relative_residual == pytest.approx(bottom.residual / true[-1])


def test_power_iteration_too_few_iterations_not_converged():
    a = gapped_matrix()
    est = power_end(a, n_iter=5, seed=0)
    assert est.n_iter == 5 and not est.converged
    assert est.relative_residual > 1e-3


def test_extremes_by_power_matches_eigvalsh():
    a = gapped_matrix()
    true = exact(a)
    est = extremes_by_power(matvec_of(a), 50, n_iter=2000, seed=0, tol=1e-8)
    assert est.method == "power"
    assert est.lambda_max == pytest.approx(true[-1], abs=1e-10)
    assert est.lambda_min == pytest.approx(true[0], abs=1e-10)
    assert est.converged_max and est.converged_min
    assert est.anisotropy == pytest.approx(true[-1] / true[0], rel=1e-9)
    again = extremes_by_power(matvec_of(a), 50, n_iter=2000, seed=0, tol=1e-8)
    assert again == est
    other = extremes_by_power(matvec_of(a), 50, n_iter=2000, seed=1, tol=1e-8)
    assert other.lambda_min == pytest.approx(est.lambda_min, abs=1e-10)


def test_lanczos_beats_power_on_plateau_spectrum():
    # Same matvec budget: Lanczos resolves lambda_min, the shift trick does not.
    a = plateau_matrix()
    n = a.shape[0]
    lz = lanczos(matvec_of(a), n, n_iter=60, seed=0)
    pw = extremes_by_power(matvec_of(a), n, n_iter=30, seed=0)
    assert lz.converged_min
    assert not pw.converged_min
    assert pw.relative_residual_min > 1e3 * lz.relative_residual_min


def test_spectrum_estimate_is_frozen_and_derived_quantities():
    est = SpectrumEstimate(
        lambda_max=10.0,
        lambda_min=-0.02,
        residual_max=1e-4,
        residual_min=2e-3,
        converged_max=True,
        converged_min=True,
        n_iter=40,
        method="lanczos",
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        est.lambda_max = 1.0  # type: ignore[misc]
    assert est.anisotropy == pytest.approx(500.0)
    assert est.relative_residual_min == pytest.approx(2e-4)
    d = est.as_dict()
    assert d["anisotropy"] == pytest.approx(500.0) and d["n_iter"] == 40
    assert dataclasses.replace(est, lambda_min=0.0).anisotropy == math.inf


@pytest.mark.parametrize("fn", [lanczos, extremes_by_power])
def test_bad_arguments_raise(fn):
    a = gapped_matrix()
    with pytest.raises(ValueError, match="n_iter"):
        fn(matvec_of(a), 50, n_iter=0, seed=0)
    with pytest.raises(ValueError, match="shape"):
        fn(lambda v: torch.zeros(3, dtype=v.dtype), 50, n_iter=5, seed=0)


AUTHOR_RULE = {"n_iter": 50, "min_iter": 10, "cos_tol": 0.9999, "shift_offset": 1.0}


def _author_power_numpy(a: np.ndarray, v: np.ndarray, shift: float) -> tuple[float, int]:
    """An independent numpy transcription of the author's loop: v <- Bv / ||Bv||, exit once
    |cos(v_new, v)| > 0.9999 at iteration >= 10, at most 50; the estimate is v^T A v of the
    vector the last product was taken of. Returns (eigenvalue, iterations)."""
    b = a - shift * np.eye(len(a))
    for it in range(1, 51):
        w = b @ v
        lam = float(v @ a @ v)
        new = w / np.linalg.norm(w)
        if it >= 10 and abs(new @ v) > 0.9999:
            return lam, it
        v = new
    return lam, 50


def _author_expected(a: torch.Tensor, seed: int):
    gen = torch.Generator().manual_seed(seed)
    v1 = spectrum._start_vector(gen, a.shape[0], torch.float64, "cpu").numpy()
    v2 = spectrum._start_vector(gen, a.shape[0], torch.float64, "cpu").numpy()
    top, n_top = _author_power_numpy(a.numpy(), v1, 0.0)
    bottom, n_bottom = _author_power_numpy(a.numpy(), v2, top + 1.0)
    return top, n_top, bottom, n_bottom


@pytest.mark.parametrize(
    "eigs, n_top, n_bottom",  # iterations at each end, as the author's loop counts them
    [
        # well separated at both ends: |cos| > 0.9999 within a few steps, so the floor of 10
        # decides; the shift lambda_max + 1 = 11 makes the bottom ratio (11 - 2) / (11 - 0.1)
        ([0.1, 2.0, 2.0, 2.0, 10.0], 10, 15),
        # +10 and -10 at the top: v swings between two directions, |cos| stays away from 1
        # and the cap of 50 decides
        ([-10.0, 1.0, 2.0, 3.0, 10.0], 50, 10),
        # ratio 0.99 at the top: v hardly moves from step to step, so |cos| > 0.9999 at the
        # floor of 10 although the estimate has not converged (the author's early exits)
        ([0.5, 1.0, 1.5, 9.9, 10.0], 10, 13),
        # ratio 0.6 at the top: |cos| > 0.9999 only after the floor, at step 12
        ([0.5, 1.0, 3.0, 6.0, 10.0], 12, 10),
    ],
)
def test_author_power_iteration_rule(eigs, n_top, n_bottom):
    a = sym_matrix(np.array(eigs), seed=3)
    est = extremes_by_power(matvec_of(a), len(eigs), seed=0, tol=1e-2, **AUTHOR_RULE)
    top, top_it, bottom, bottom_it = _author_expected(a, seed=0)
    assert (est.n_iter_max, est.n_iter_min) == (top_it, bottom_it)
    assert est.n_iter == top_it + bottom_it
    # pinned too, so that each case keeps exercising the exit its comment names
    assert (est.n_iter_max, est.n_iter_min) == (n_top, n_bottom)
    assert est.lambda_max == pytest.approx(top, rel=1e-9)
    assert est.lambda_min == pytest.approx(bottom, rel=1e-9, abs=1e-12)


def test_author_power_iteration_well_separated_matches_eigvalsh():
    a = sym_matrix(np.array([0.1, 2.0, 2.0, 2.0, 10.0]), seed=3)
    est = extremes_by_power(matvec_of(a), 5, seed=0, tol=1e-2, **AUTHOR_RULE)
    true = exact(a)
    assert est.n_iter_max == 10  # stopped by |cos| once the floor of 10 is reached
    assert est.lambda_max == pytest.approx(true[-1], rel=1e-9)
    assert est.lambda_min == pytest.approx(true[0], abs=0.02)  # ratio 0.83 per step
    # the shift is lambda_max + 1, not lambda_max: lambda_min's iteration differs
    plain = extremes_by_power(
        matvec_of(a), 5, seed=0, tol=1e-2, **{**AUTHOR_RULE, "shift_offset": 0.0}
    )
    assert plain.lambda_min != est.lambda_min


def test_author_power_iteration_exits_unconverged():
    """|cos| > 0.9999 is not convergence: with lambda_2 / lambda_1 = 0.99 the rule exits at
    its floor of 10 with lambda_max off by more than its residual allows to ignore."""
    a = sym_matrix(np.array([0.5, 1.0, 1.5, 9.9, 10.0]), seed=3)
    est = extremes_by_power(matvec_of(a), 5, seed=0, tol=1e-3, **AUTHOR_RULE)
    assert est.n_iter_max == 10
    assert abs(est.lambda_max - exact(a)[-1]) > 1e-3
    assert not est.converged_max  # the residual says so


# ---- ARPACK as the oracle of a matrix-free operator ------------------------------------


def diag_plus_low_rank(n: int = 3000, rank: int = 4, seed: int = 0):
    """v -> (D + U S U^T) v, never formed: a plateau-like diagonal (one tiny negative
    value, a bulk in [0.5, 5]) plus a few large directions that mix every coordinate."""
    rng = np.random.default_rng(seed)
    d = torch.from_numpy(np.concatenate([[-0.07], rng.uniform(0.5, 5.0, n - 1)]))
    u = torch.from_numpy(np.linalg.qr(rng.standard_normal((n, rank)))[0])
    s = torch.tensor([50.0, 25.0, 12.0, -0.3][:rank], dtype=torch.float64)
    return (lambda v: d * v + u @ (s * (u.T @ v))), n


def mlp_hessian(seed: int = 0):
    """v -> H v, the Hessian of a small MLP's cross-entropy at random weights by double
    backward (as `mbc.diagnostics.hessian` does for the transformer): indefinite, clustered."""
    gen = torch.Generator().manual_seed(seed)
    x, y = (
        torch.randn(64, 8, generator=gen, dtype=torch.float64),
        torch.randint(0, 3, (64,), generator=gen),
    )
    shapes = [(8, 16), (16,), (16, 3), (3,)]
    sizes = [math.prod(s) for s in shapes]
    w0 = torch.randn(sum(sizes), generator=gen, dtype=torch.float64) * 0.5

    def loss(w: torch.Tensor) -> torch.Tensor:
        a, b, c, e = (p.view(s) for p, s in zip(w.split(sizes), shapes, strict=True))
        return torch.nn.functional.cross_entropy(torch.tanh(x @ a + b) @ c + e, y)

    def hvp(v: torch.Tensor) -> torch.Tensor:
        w = w0.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(loss(w), w, create_graph=True)
        return torch.autograd.grad(g @ v, w)[0]

    return hvp, sum(sizes)


@pytest.mark.parametrize("operator", [diag_plus_low_rank, mlp_hessian])
def test_lanczos_agrees_with_arpack_on_a_matrix_free_operator(operator):
    """scipy.sparse.linalg.eigsh (ARPACK) on a LinearOperator over the same matvec is the
    oracle: our Ritz values lie inside ARPACK's extremes (Lanczos never overshoots), and each
    converged end is within its true residual of ARPACK's eigenvalue."""
    from scipy.sparse.linalg import LinearOperator, eigsh

    matvec, n = operator()
    op = LinearOperator(
        (n, n), matvec=lambda v: matvec(torch.from_numpy(np.ravel(v))).numpy(), dtype=np.float64
    )
    v0 = np.random.default_rng(1).standard_normal(n)
    top = float(eigsh(op, k=1, which="LA", tol=1e-12, v0=v0, return_eigenvectors=False)[0])
    bottom = float(eigsh(op, k=1, which="SA", tol=1e-12, v0=v0, return_eigenvectors=False)[0])
    est = lanczos(matvec, n, n_iter=min(n, 120), seed=0)
    eps = 1e-9 * max(abs(top), abs(bottom))
    assert bottom - eps <= est.lambda_min <= est.lambda_max <= top + eps
    assert est.converged_max and est.converged_min  # both ends are decided, not skipped
    for theta, truth, residual in (
        (est.lambda_max, top, est.residual_max),
        (est.lambda_min, bottom, est.residual_min),
    ):
        assert abs(theta - truth) <= residual + eps, (theta, truth, residual)
