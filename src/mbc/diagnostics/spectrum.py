"""Matrix-free estimates of the extreme eigenvalues of a symmetric operator
(docs/method.md#hessian).

The operator is only available as ``matvec(v) -> A v`` on 1-D float tensors of dimension ``n``
(for the Hessian, one Hessian-vector product per call; see :mod:`mbc.diagnostics.hessian`), so we use
Krylov methods that touch ``A`` through matvecs alone:

- :func:`lanczos`: Lanczos with full reorthogonalisation. ``m`` matvecs give the extreme Ritz
  values of ``A`` on the ``m``-dimensional Krylov space; both ends converge together, and much
  faster than power iteration when the spectrum is ill-conditioned (the paper's plateau Hessian).
- :func:`extremes_by_power`: power iteration, the simplest baseline; ``lambda_min`` comes
  from power iteration on ``A - lambda_max I`` (the shift trick), whose convergence rate is
  ``|lambda_2' - lambda_max| / |lambda_min - lambda_max|`` -- close to 1 when ``lambda_min`` sits
  at the edge of a dense bulk, so it is slow exactly where the paper needs it.

Every estimate carries the *true* residual ``||A v - lambda v||`` of its eigenvector (one more
matvec, not the cheap Lanczos bound), because the paper's ``lambda_min`` is tiny and its sign was
found unreliable: the residual is what says how much the estimate supports. For symmetric ``A``
some eigenvalue lies within ``residual`` of the estimate, so an estimate whose residual exceeds
``|lambda_min|`` does not determine the sign of ``lambda_min``.

Relative residuals divide by the operator scale ``max(|lambda_max|, |lambda_min|)`` (an estimate
of ``||A||_2``), not by the eigenvalue itself: ``lambda_min`` may be ~0, and an absolute accuracy
of ``tol * ||A||`` is what a Krylov method can promise at either end.

Randomness: the start vector is drawn from an explicit ``torch.Generator`` seeded with ``seed``,
on the CPU in float64 and then moved, so the global RNG is untouched and the same seed gives the
same start vector on every device.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

__all__ = [
    "PowerEstimate",
    "SpectrumEstimate",
    "extremes_by_power",
    "lanczos",
]

Matvec = Callable[[torch.Tensor], torch.Tensor]

_TINY = torch.finfo(torch.float64).tiny  # guards divisions by a zero operator scale
# Lanczos breakdown: beta below this many eps times ||T|| is round-off (the matvec itself errs by
# ~sqrt(n) eps ||A||), i.e. the Krylov space is invariant to working precision.
_BREAKDOWN_EPS = 1e3


@dataclass(frozen=True)
class SpectrumEstimate:
    """Extreme eigenvalues of a symmetric operator, with the evidence for them.

    Attributes:
        lambda_max, lambda_min: largest / smallest eigenvalue estimates (units of ``A``; for a
            Hessian, loss units per parameter unit squared).
        residual_max, residual_min: true residuals ``||A v - lambda v||_2`` of the unit
            eigenvector estimates ``v`` (same units as the eigenvalues).
        converged_max, converged_min: ``residual / scale <= tol`` with
            ``scale = max(|lambda_max|, |lambda_min|)``. "Converged" certifies an eigenpair to that
            accuracy; for power iteration it does not by itself certify that it is the extreme one.
        n_iter: matvecs spent in the iterations (excluding the residual checks).
        method: ``"lanczos"`` or ``"power"``.
        n_iter_max, n_iter_min: power iteration only, the matvecs of each end (None for
            Lanczos, whose two ends come from one iteration).
    """

    lambda_max: float
    lambda_min: float
    residual_max: float
    residual_min: float
    converged_max: bool
    converged_min: bool
    n_iter: int
    method: str
    n_iter_max: int | None = None
    n_iter_min: int | None = None

    @property
    def scale(self) -> float:
        """Operator-scale estimate ``max(|lambda_max|, |lambda_min|)`` (~ ``||A||_2``)."""
        return max(abs(self.lambda_max), abs(self.lambda_min))

    @property
    def relative_residual_max(self) -> float:
        return self.residual_max / max(self.scale, _TINY)

    @property
    def relative_residual_min(self) -> float:
        return self.residual_min / max(self.scale, _TINY)

    @property
    def anisotropy(self) -> float:
        """``|lambda_max / lambda_min|`` (dimensionless); ``inf`` when ``lambda_min == 0``."""
        if self.lambda_min == 0.0:
            return math.inf
        return abs(self.lambda_max / self.lambda_min)

    def as_dict(self) -> dict[str, float | bool | int | str]:
        """Fields plus the derived quantities, for JSON/CSV artefacts."""
        return {
            **asdict(self),
            "relative_residual_max": self.relative_residual_max,
            "relative_residual_min": self.relative_residual_min,
            "anisotropy": self.anisotropy,
        }


@dataclass(frozen=True)
class PowerEstimate:
    """One eigenvalue from power iteration (one end of :func:`extremes_by_power`).

    Attributes:
        eigenvalue: Rayleigh quotient ``v^T A v`` of the final unit vector ``v``.
        residual: ``||A v - eigenvalue v||_2``.
        relative_residual: ``residual / max(|eigenvalue|, |shift|)``; with ``shift`` at the far
            end of the spectrum both terms are lower bounds of ``||A||_2``.
        converged: ``relative_residual <= tol`` (the iteration stops as soon as it holds).
        n_iter: matvecs spent.
    """

    eigenvalue: float
    residual: float
    relative_residual: float
    converged: bool
    n_iter: int


def _check_sizes(n: int, n_iter: int) -> None:
    if n < 1:
        raise ValueError(f"operator dimension n must be >= 1, got {n}")
    if n_iter < 1:
        raise ValueError(f"n_iter must be >= 1, got {n_iter}")


def _start_vector(gen: torch.Generator, n: int, dtype: torch.dtype, device) -> torch.Tensor:
    """Unit Gaussian vector (n,): drawn on the CPU in float64 so every device sees the same one."""
    v = torch.randn(n, generator=gen, dtype=torch.float64)
    v = v / torch.linalg.vector_norm(v)
    return v.to(device=device, dtype=dtype)


def _apply(matvec: Matvec, v: torch.Tensor) -> torch.Tensor:
    """``matvec(v)`` checked to be (n,) and cast to ``v``'s dtype/device."""
    w = matvec(v)
    if w.shape != v.shape:
        raise ValueError(f"matvec returned shape {tuple(w.shape)}, expected {tuple(v.shape)}")
    return w.to(dtype=v.dtype, device=v.device)


def _residual(matvec: Matvec, v: torch.Tensor, theta: float) -> float:
    """True residual ``||A v - theta v||`` for a unit vector v (one matvec)."""
    return torch.linalg.vector_norm(_apply(matvec, v) - theta * v).item()


def lanczos(
    matvec: Matvec,
    n: int,
    *,
    n_iter: int,
    seed: int,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str = "cpu",
    tol: float = 1e-3,
) -> SpectrumEstimate:
    """Extreme eigenvalues of symmetric ``A`` (n x n) by Lanczos with full reorthogonalisation.

    Builds an orthonormal Krylov basis ``V`` (m x n, ``m = min(n_iter, n)``) and the tridiagonal
    ``T = V A V^T`` (m x m); the extreme eigenvalues of ``T`` (Ritz values) satisfy
    ``lambda_min(A) <= theta_min <= theta_max <= lambda_max(A)``. Every new vector is
    re-orthogonalised against all previous ones (classical Gram-Schmidt, twice): plain Lanczos
    loses orthogonality in floating point and then returns spurious copies of converged
    eigenvalues. Memory is ``m * n`` elements of ``dtype`` for ``V`` (100 x 808K float64 = 650 MB).

    The iteration stops early if the Krylov space becomes invariant (``beta`` at round-off
    level): the Ritz values are then eigenvalues of ``A`` to working precision. ``n_iter`` in the
    result is the number of Lanczos steps (= matvecs) taken; the residuals cost one extra matvec
    per end (one if ``m == 1``).

    Args:
        matvec: ``v (n,) -> A v (n,)``; must be linear and symmetric.
        n: dimension of the operator.
        n_iter: Lanczos steps requested (capped at ``n``).
        seed: seeds the start vector's ``torch.Generator``.
        dtype, device: where the basis lives and the arithmetic is done.
        tol: relative-residual tolerance of the ``converged_*`` flags.
    """
    _check_sizes(n, n_iter)
    m = min(n_iter, n)
    eps = torch.finfo(dtype).eps
    q = _start_vector(torch.Generator().manual_seed(seed), n, dtype, device)

    basis = torch.empty((m, n), dtype=dtype, device=device)
    alphas: list[float] = []
    betas: list[float] = []
    beta = 0.0
    anorm = 0.0  # running estimate of ||T||, the scale for the breakdown test
    for j in range(m):
        basis[j] = q
        w = _apply(matvec, q)
        alpha = torch.dot(w, q).item()
        alphas.append(alpha)
        # Three-term recurrence, then full reorthogonalisation against V[:j+1] ("twice is enough").
        w = w - alpha * q
        if j > 0:
            w = w - beta * basis[j - 1]
        v_seen = basis[: j + 1]
        for _ in range(2):
            w = w - v_seen.T @ (v_seen @ w)
        if j == m - 1:
            break  # T_m needs no beta_m
        beta = torch.linalg.vector_norm(w).item()
        anorm = max(anorm, abs(alpha) + beta)
        if beta <= _BREAKDOWN_EPS * eps * anorm:
            break  # invariant Krylov space: the Ritz values are eigenvalues of A
        betas.append(beta)
        q = w / beta

    k = len(alphas)
    t = torch.diag(torch.tensor(alphas, dtype=torch.float64))
    if betas:
        off = torch.tensor(betas, dtype=torch.float64)
        t = t + torch.diag(off, 1) + torch.diag(off, -1)
    theta, s = torch.linalg.eigh(t)  # ascending Ritz values, (k,), and T's eigenvectors (k, k)

    def ritz(i: int) -> tuple[float, torch.Tensor]:
        y = basis[:k].T @ s[:, i].to(dtype=dtype, device=device)  # (n,)
        return theta[i].item(), y / torch.linalg.vector_norm(y)

    lam_max, y_max = ritz(k - 1)
    lam_min, y_min = ritz(0)
    res_max = _residual(matvec, y_max, lam_max)
    res_min = res_max if k == 1 else _residual(matvec, y_min, lam_min)
    return _estimate(lam_max, lam_min, res_max, res_min, n_iter=k, method="lanczos", tol=tol)


def _estimate(
    lam_max: float,
    lam_min: float,
    res_max: float,
    res_min: float,
    *,
    n_iter: int,
    method: str,
    tol: float,
) -> SpectrumEstimate:
    """Assemble a SpectrumEstimate, applying the one convergence rule of this module."""
    scale = max(abs(lam_max), abs(lam_min), _TINY)
    return SpectrumEstimate(
        lambda_max=lam_max,
        lambda_min=lam_min,
        residual_max=res_max,
        residual_min=res_min,
        converged_max=res_max / scale <= tol,
        converged_min=res_min / scale <= tol,
        n_iter=n_iter,
        method=method,
    )


def _power(
    matvec: Matvec,
    v: torch.Tensor,
    *,
    n_iter: int,
    shift: float,
    tol: float,
    cos_tol: float | None = None,
    min_iter: int = 1,
):
    """Power iteration on ``B = A - shift I`` from unit vector v (n,): the eigenvalue of ``A``
    farthest from ``shift`` (with ``shift = 0`` the largest-magnitude one, with
    ``shift >= lambda_max`` ``lambda_min``). Runs at most ``n_iter`` steps (one matvec each).
    Stopping rule: with ``cos_tol`` None, as soon as the relative residual is ``<= tol``
    (ours); with ``cos_tol`` set, as soon as ``|cos(v_t, v_{t-1})| > cos_tol`` at step
    ``t >= min_iter`` (the author's rule: ``v_t = B v_{t-1} / ||B v_{t-1}||``; the estimate is
    then the Rayleigh quotient of ``v_{t-1}``, whose matvec step t computed). Converges at rate
    ``|mu_2 / mu_1|`` of the shifted operator and stalls if its two dominant eigenvalues have
    equal magnitude (e.g. ``+c`` and ``-c``).

    The Rayleigh quotient ``mu = v^T B v`` and the residual ``||B v - mu v||`` come free with the
    matvec of each step, and ``B v - mu v = A v - (mu + shift) v``, so the residual is the true
    one for ``A`` and the eigenvalue ``mu + shift``.
    """
    steps = 0
    while True:
        w = _apply(matvec, v) - shift * v
        steps += 1
        mu = torch.dot(v, w).item()
        residual = torch.linalg.vector_norm(w - mu * v).item()
        eigenvalue = mu + shift
        rel = residual / max(abs(eigenvalue), abs(shift), _TINY)
        norm = torch.linalg.vector_norm(w)
        nxt = w / norm if norm > 0 else v  # w == 0: v is an exact eigenvector (residual 0)
        if cos_tol is None:
            stop = rel <= tol
        else:
            stop = steps >= min_iter and abs(torch.dot(nxt, v).item()) > cos_tol
        if stop or steps == n_iter:
            return PowerEstimate(eigenvalue, residual, rel, rel <= tol, steps)
        v = nxt


def extremes_by_power(
    matvec: Matvec,
    n: int,
    *,
    n_iter: int,
    seed: int,
    tol: float = 1e-3,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str = "cpu",
    cos_tol: float | None = None,
    min_iter: int = 1,
    shift_offset: float = 0.0,
) -> SpectrumEstimate:
    """``lambda_max`` by power iteration, then ``lambda_min`` by power iteration on
    ``A - (lambda_max + shift_offset) I``.

    Assumes ``lambda_max`` is the largest-magnitude eigenvalue (true for a Hessian near a
    minimum or on a plateau, where negative curvature is small); otherwise the first stage
    returns the most negative eigenvalue. Each stage runs at most ``n_iter`` steps, stopped by
    `_power`'s rule (``cos_tol`` None: relative residual <= ``tol``; else the author's
    ``|cos| > cos_tol`` after at least ``min_iter`` steps); both start vectors come from one
    generator seeded with ``seed``. The result's ``n_iter`` is the total, ``n_iter_max`` and
    ``n_iter_min`` each end's. The author's estimator (docs/method.md#hessian):
    ``n_iter=50, min_iter=10, cos_tol=0.9999, shift_offset=1.0``.
    """
    _check_sizes(n, n_iter)
    rule = {"tol": tol, "cos_tol": cos_tol, "min_iter": min_iter}
    gen = torch.Generator().manual_seed(seed)
    top = _power(matvec, _start_vector(gen, n, dtype, device), n_iter=n_iter, shift=0.0, **rule)
    bottom = _power(
        matvec,
        _start_vector(gen, n, dtype, device),
        n_iter=n_iter,
        shift=top.eigenvalue + shift_offset,
        **rule,
    )
    est = _estimate(
        top.eigenvalue,
        bottom.eigenvalue,
        top.residual,
        bottom.residual,
        n_iter=top.n_iter + bottom.n_iter,
        method="power",
        tol=tol,
    )
    return dataclasses.replace(est, n_iter_max=top.n_iter, n_iter_min=bottom.n_iter)
