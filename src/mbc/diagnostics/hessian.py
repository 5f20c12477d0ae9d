"""Matrix-free Hessian of a scalar loss w.r.t. a list of parameters (docs/method.md#hessian).

The Hessian ``H`` (n x n, ``n = sum(p.numel())``, units: loss per parameter unit squared) is
never formed: :func:`hvp_fn` returns ``v -> H v`` computed by double backward (Pearlmutter's
trick as done in PyHessian): ``g = dL/dtheta`` with ``create_graph=True``, then
``H v = d<g, v>/dtheta``. One product costs about two backward passes. :func:`hessian_extremes`
feeds it to :mod:`mbc.diagnostics.spectrum`; :func:`checkpoint_estimates` to the estimators
config `diagnostics.hessian.methods` names (registered with :func:`estimator`).

Flat vectors follow the order of ``params``, each parameter flattened row-major
(``torch.cat([p.reshape(-1) for p in params])``), the same layout as
``torch.nn.utils.parameters_to_vector``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from mbc.diagnostics import config_sections
from mbc.diagnostics.config_sections import HessianDiagnostic
from mbc.diagnostics.hessian_table import CHECKPOINT_COLUMNS, ESTIMATE_COLUMNS
from mbc.diagnostics.spectrum import SpectrumEstimate, extremes_by_power, lanczos

__all__ = [
    "ESTIMATORS",
    "author_power_rule",
    "checkpoint_estimates",
    "checkpoint_rows",
    "estimator",
    "hessian_extremes",
    "hvp_fn",
    "n_params",
]

# An estimator (matvec, n, cfg, *, seed, device) -> SpectrumEstimate of the Hessian behind
# `matvec` (n x n, float64 vectors on `device`), its budget and rule read from config
# `diagnostics.hessian` (`cfg`); config `diagnostics.hessian.methods` names the ones every
# checkpoint gets, in order. Register one with @estimator("name"), a name declared in
# `mbc.diagnostics.config_sections.HESSIAN_ESTIMATORS` (config is checked against those).
Estimator = Callable[..., SpectrumEstimate]
ESTIMATORS: dict[str, Estimator] = {}


def estimator(name: str) -> Callable[[Estimator], Estimator]:
    """Register the decorated function as the Hessian estimator `name`."""

    def register(fn: Estimator) -> Estimator:
        if name not in config_sections.HESSIAN_ESTIMATORS:
            raise ValueError(f"declare the Hessian estimator {name!r} in HESSIAN_ESTIMATORS")
        if name in ESTIMATORS:
            raise ValueError(f"a Hessian estimator named {name!r} is registered already")
        ESTIMATORS[name] = fn
        return fn

    return register


def n_params(params: Sequence[torch.Tensor]) -> int:
    """Dimension n of the flat parameter vector."""
    return sum(p.numel() for p in params)


def _check_params(params: Sequence[torch.Tensor]) -> None:
    if not params:
        raise ValueError("params is empty")
    for i, p in enumerate(params):
        if not p.requires_grad:
            raise ValueError(f"params[{i}] does not require grad")
        if not p.is_floating_point():
            raise ValueError(f"params[{i}] has non-float dtype {p.dtype}")
    devices = {p.device for p in params}
    if len(devices) > 1:
        raise ValueError(f"params live on several devices: {sorted(map(str, devices))}")


def hvp_fn(
    loss_fn: Callable[[], torch.Tensor], params: Sequence[torch.Tensor]
) -> Callable[[torch.Tensor], torch.Tensor]:
    """Hessian-vector product ``v (n,) -> H v (n,)`` of ``loss_fn()`` at the current ``params``.

    ``v`` may have any float dtype; each slice is cast to its parameter's dtype and device, the
    product is computed there, and the result is returned as float64 on the params' device (the
    Krylov arithmetic in :mod:`mbc.diagnostics.spectrum` is float64 whatever the model's precision).

    Design choice -- the first-order graph is built once, here, and cached: ``loss_fn`` is
    called exactly once and each product is a single ``autograd.grad(<g, v>, params,
    retain_graph=True)``. This saves a forward and a backward per product (~1/3 of the cost)
    and, more importantly, makes every product use the *same* loss: Lanczos needs one fixed
    symmetric matrix, and re-running a ``loss_fn`` with any randomness (dropout, a resampled
    batch) would give a different matrix per call. The price is that the graph (activations of
    the subsample plus the gradient graph) stays in memory as long as the returned function
    lives, and the function is stale if ``params`` are changed in place afterwards (autograd
    then raises on the version counter). Put the model in ``eval()`` mode before calling.

    The forward is run with grad enabled (so this works under ``torch.no_grad()``) and with
    ``scaled_dot_product_attention`` restricted to its math backend: the fused flash /
    memory-efficient kernels, on CPU as well as CUDA, have no double backward.

    Parameters the loss does not depend on get zero rows and columns.
    """
    params = list(params)
    _check_params(params)
    with torch.enable_grad(), sdpa_kernel([SDPBackend.MATH]):
        loss = loss_fn()
        if loss.numel() != 1:
            raise ValueError(f"loss_fn must return a scalar, got shape {tuple(loss.shape)}")
        grads = torch.autograd.grad(loss, params, create_graph=True, allow_unused=True)
    grads = [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params, strict=True)]
    sizes = [p.numel() for p in params]
    n = sum(sizes)
    device = params[0].device

    def hvp(v: torch.Tensor) -> torch.Tensor:
        if v.shape != (n,):
            raise ValueError(f"v must have shape ({n},), got {tuple(v.shape)}")
        pieces = torch.split(v.detach(), sizes)
        with torch.enable_grad():
            dot = sum(
                (g * c.to(device=p.device, dtype=p.dtype).view_as(p)).sum()
                for g, c, p in zip(grads, pieces, params, strict=True)
            )
            if not dot.requires_grad:  # gradient constant in params: H = 0
                return torch.zeros(n, dtype=torch.float64, device=device)
            hv = torch.autograd.grad(dot, params, retain_graph=True, allow_unused=True)
        return torch.cat(
            [
                (torch.zeros_like(p) if h is None else h).reshape(-1).to(torch.float64)
                for h, p in zip(hv, params, strict=True)
            ]
        )

    return hvp


def hessian_extremes(
    loss_fn: Callable[[], torch.Tensor],
    params: Sequence[torch.Tensor],
    *,
    n_iter: int,
    seed: int,
    method: str = "lanczos",
    tol: float = 1e-3,
) -> SpectrumEstimate:
    """``lambda_max``, ``lambda_min`` (with residuals) of the Hessian of ``loss_fn()`` at ``params``.

    ``method="lanczos"``: ``n_iter`` Lanczos steps (see :func:`mbc.diagnostics.spectrum.lanczos`);
    ``method="power"``: up to ``n_iter`` power steps per end with the shift trick (see
    :func:`mbc.diagnostics.spectrum.extremes_by_power`). The Krylov vectors are float64 on the params'
    device. ``tol`` is the relative-residual tolerance of the ``converged_*`` flags.
    """
    run = {"lanczos": lanczos, "power": extremes_by_power}
    if method not in run:
        raise ValueError(f"method must be one of {sorted(run)}, got {method!r}")
    params = list(params)
    return run[method](
        hvp_fn(loss_fn, params),
        n_params(params),
        n_iter=n_iter,
        seed=seed,
        tol=tol,
        dtype=torch.float64,
        device=params[0].device,
    )


# ---- one checkpoint of a run, as config `diagnostics.hessian` asks (E10) ----------------


def author_power_rule(cfg: HessianDiagnostic) -> dict:
    """The author's power-iteration rule: stop once |cos(v_t, v_t-1)| > power_cos after at
    least power_min_iter steps (power_n_iter at most); lambda_min from
    H - (lambda_max + power_shift_offset) I. Without power_cos, our residual rule
    (`mbc.diagnostics.spectrum._power`)."""
    if cfg.power_cos is None:
        return {"shift_offset": cfg.power_shift_offset}
    return {
        "cos_tol": cfg.power_cos,
        "min_iter": cfg.power_min_iter,
        "shift_offset": cfg.power_shift_offset,
    }


@estimator("lanczos")
def lanczos_estimate(
    matvec: Callable[[torch.Tensor], torch.Tensor],
    n: int,
    cfg: HessianDiagnostic,
    *,
    seed: int,
    device: torch.device,
) -> SpectrumEstimate:
    """Ours: cfg.n_iter Lanczos steps with full reorthogonalisation."""
    return lanczos(
        matvec, n, n_iter=cfg.n_iter, seed=seed, tol=cfg.tol, dtype=torch.float64, device=device
    )


@estimator("power")
def power_estimate(
    matvec: Callable[[torch.Tensor], torch.Tensor],
    n: int,
    cfg: HessianDiagnostic,
    *,
    seed: int,
    device: torch.device,
) -> SpectrumEstimate:
    """The author's: power iteration, at most cfg.power_n_iter steps per end, stopped and
    shifted by `author_power_rule`."""
    return extremes_by_power(
        matvec,
        n,
        n_iter=cfg.power_n_iter,
        seed=seed,
        tol=cfg.tol,
        dtype=torch.float64,
        device=device,
        **author_power_rule(cfg),
    )


def checkpoint_estimates(
    loss_fn: Callable[[], torch.Tensor],
    params: Sequence[torch.Tensor],
    cfg: HessianDiagnostic,
    seed: int,
) -> dict[str, SpectrumEstimate]:
    """cfg.methods' estimators, in order, on one checkpoint's Hessian: the first-order graph
    of :func:`hvp_fn` is built once and shared by all of them, so they estimate one matrix."""
    unknown = [m for m in cfg.methods if m not in ESTIMATORS]
    if unknown:
        raise ValueError(
            f"diagnostics.hessian.methods: no Hessian estimator named {unknown[0]!r} "
            f"(registered: {', '.join(ESTIMATORS)})"
        )
    params = list(params)
    matvec, n = hvp_fn(loss_fn, params), n_params(params)
    return {
        m: ESTIMATORS[m](matvec, n, cfg, seed=seed, device=params[0].device) for m in cfg.methods
    }


def checkpoint_rows(
    run_id: str,
    k: int,
    tau: int | None,
    step: int,
    tau_fraction: float,
    phase: str,
    estimates: dict[str, SpectrumEstimate],
) -> list[dict]:
    """hessian.csv's rows of one checkpoint (`HESSIAN_COLUMNS`): one per estimator, in
    `estimates`' order."""
    head = dict(zip(CHECKPOINT_COLUMNS, (run_id, k, tau, step, tau_fraction, phase), strict=True))
    return [
        {**head, "method": m, **{c: getattr(e, c) for c in ESTIMATE_COLUMNS}}
        for m, e in estimates.items()
    ]
