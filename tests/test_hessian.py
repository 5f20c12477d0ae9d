"""Matrix-free Hessian products and extremes against closed forms and full autograd Hessians."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import fixture_config
from torch.nn.attention import SDPBackend, sdpa_kernel

from mbc.diagnostics.config_sections import Diagnostics
from mbc.diagnostics.hessian import (
    author_power_rule,
    checkpoint_estimates,
    checkpoint_rows,
    estimator,
    hessian_extremes,
    hvp_fn,
    n_params,
)
from mbc.diagnostics.hessian_table import HESSIAN_COLUMNS
from mbc.diagnostics.spectrum import extremes_by_power


def assert_close(actual: torch.Tensor, expected: torch.Tensor, rtol=1e-7, atol=1e-12) -> None:
    """Elementwise |a - e| <= atol + rtol |e|, same dtype (torch.testing's first call costs ~1 s)."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    err = (actual - expected).abs().max().item()
    assert torch.allclose(actual, expected, rtol=rtol, atol=atol), f"max abs error {err:.3g}"


# ---------------------------------------------------------------------------------------------
# Closed form: L(x) = 0.5 x^T A x + b^T x has Hessian exactly A.


def sym_matrix(eigs: np.ndarray, seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((len(eigs), len(eigs))))
    return torch.from_numpy((q * eigs) @ q.T)


def quadratic(n: int = 60, seed: int = 0, dtype=torch.float64, device="cpu"):
    """(loss_fn, [x], A) with spectrum {-0.05, bulk in [0.3, 3], 40}: anisotropy 800."""
    rng = np.random.default_rng(seed + 1)
    eigs = np.concatenate([[-0.05], rng.uniform(0.3, 3.0, n - 2), [40.0]])
    a = sym_matrix(eigs, seed).to(device=device, dtype=dtype)
    b = torch.from_numpy(rng.standard_normal(n)).to(device=device, dtype=dtype)
    x = torch.from_numpy(rng.standard_normal(n)).to(device=device, dtype=dtype).requires_grad_()
    return (lambda: 0.5 * x @ (a @ x) + b @ x), [x], a


def test_hvp_quadratic_is_a_times_v():
    loss_fn, params, a = quadratic()
    hvp = hvp_fn(loss_fn, params)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        v = torch.randn(60, generator=gen, dtype=torch.float64)
        hv = hvp(v)
        assert hv.dtype == torch.float64 and hv.shape == (60,)
        assert_close(hv, a @ v, rtol=0, atol=1e-12)


def test_hessian_extremes_quadratic_lanczos():
    loss_fn, params, a = quadratic()
    true = np.linalg.eigvalsh(a.numpy())
    est = hessian_extremes(loss_fn, params, n_iter=60, seed=0)
    assert est.method == "lanczos"
    assert est.lambda_max == pytest.approx(true[-1], abs=1e-9)
    assert est.lambda_min == pytest.approx(true[0], abs=1e-9)
    assert est.converged_max and est.converged_min
    assert est.anisotropy == pytest.approx(800.0, rel=1e-6)


def test_hessian_extremes_quadratic_power_reports_nonconvergence():
    # lambda_min = -0.05 sits 0.35 below a bulk spread over 40: the shift trick converges at rate
    # ~ (40 - 0.3) / 40.05 per step, so 200 steps are not enough -- and the flag must say so.
    loss_fn, params, a = quadratic()
    true = np.linalg.eigvalsh(a.numpy())
    est = hessian_extremes(loss_fn, params, n_iter=200, seed=0, method="power")
    assert est.method == "power"
    assert est.lambda_max == pytest.approx(true[-1], rel=1e-6)
    assert est.converged_max
    assert not est.converged_min
    # Whatever it returns, the residual honestly bounds the distance to the spectrum.
    assert np.min(np.abs(true - est.lambda_min)) <= est.residual_min * (1 + 1e-9)


def test_hessian_extremes_seed_reproducible_and_seed_independent():
    loss_fn, params, _ = quadratic()
    first = hessian_extremes(loss_fn, params, n_iter=40, seed=3)
    assert hessian_extremes(loss_fn, params, n_iter=40, seed=3) == first
    other = hessian_extremes(loss_fn, params, n_iter=40, seed=4)
    assert other.lambda_max == pytest.approx(first.lambda_max, abs=1e-6)
    assert other.lambda_min == pytest.approx(first.lambda_min, abs=1e-6)


# ---------------------------------------------------------------------------------------------
# A tiny softmax model, small enough for torch.autograd.functional.hessian.


def tiny_model(dtype=torch.float64, attention: bool = False):
    """(loss_fn, params, flat_loss) for a tanh MLP (optionally one SDPA layer) + cross-entropy.

    ``flat_loss(theta)`` is the same loss as a function of the flat parameter vector, laid out
    as ``torch.cat([p.reshape(-1) for p in params])``.
    """
    gen = torch.Generator().manual_seed(0)  # draw in float64, then cast: same model per dtype
    x = torch.randn(16, 3, 4, generator=gen, dtype=torch.float64).to(dtype)  # (batch, tok, feat)
    y = torch.randint(0, 3, (16,), generator=gen)
    shapes = [(4, 5), (5,), (5, 3), (3,)]
    params = [
        (0.7 * torch.randn(s, generator=gen, dtype=torch.float64)).to(dtype).requires_grad_()
        for s in shapes
    ]

    def loss_of(w1, b1, w2, b2):
        h = torch.tanh(x @ w1 + b1)  # (batch, tokens, 5)
        if attention:
            # On parameter-dependent activations, 4-D (batch, heads=1, tokens, d) as in
            # mbc.training.model: that layout picks the fused CPU kernel, which has no double backward.
            a = h.unsqueeze(1)
            h = h + F.scaled_dot_product_attention(a, a, a, is_causal=True).squeeze(1)
        return F.cross_entropy(h.mean(dim=1) @ w2 + b2, y)

    def flat_loss(theta):
        pieces = torch.split(theta, [int(np.prod(s)) for s in shapes])
        return loss_of(*(p.view(s) for p, s in zip(pieces, shapes, strict=True)))

    return (lambda: loss_of(*params)), params, flat_loss


def full_hessian(params, flat_loss) -> torch.Tensor:
    theta = torch.cat([p.detach().reshape(-1) for p in params])
    with sdpa_kernel([SDPBackend.MATH]):  # the reference needs a double backward too
        return torch.autograd.functional.hessian(flat_loss, theta)


@pytest.mark.parametrize("attention", [False, True], ids=["mlp", "sdpa"])
def test_hvp_matches_full_hessian(attention):
    loss_fn, params, flat_loss = tiny_model(attention=attention)
    h = full_hessian(params, flat_loss)
    n = n_params(params)
    assert h.shape == (n, n) == (43, 43)
    hvp = hvp_fn(loss_fn, params)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        v = torch.randn(n, generator=gen, dtype=torch.float64)
        assert_close(hvp(v), h @ v, rtol=1e-10, atol=1e-12)
    # Linear in v, and symmetric: u^T H w == w^T H u.
    u, w = torch.randn(n, generator=gen, dtype=torch.float64), torch.randn(n, generator=gen)
    w = w.double()
    assert_close(hvp(2.0 * u - 3.0 * w), 2.0 * hvp(u) - 3.0 * hvp(w))
    assert (u @ hvp(w)).item() == pytest.approx((w @ hvp(u)).item(), rel=1e-10)


def test_hessian_extremes_match_full_hessian():
    loss_fn, params, flat_loss = tiny_model()
    true = np.linalg.eigvalsh(full_hessian(params, flat_loss).numpy())
    est = hessian_extremes(loss_fn, params, n_iter=43, seed=0)
    scale = max(abs(true[0]), abs(true[-1]))
    assert est.lambda_max == pytest.approx(true[-1], abs=1e-9 * scale)
    assert est.lambda_min == pytest.approx(true[0], abs=1e-9 * scale)
    assert est.converged_max and est.converged_min
    assert est.residual_max < 1e-9 * scale and est.residual_min < 1e-9 * scale


def test_float32_params_give_float64_products_close_to_float64():
    loss64, params64, flat_loss = tiny_model(dtype=torch.float64)
    loss32, params32, _ = tiny_model(dtype=torch.float32)
    h = full_hessian(params64, flat_loss)
    v = torch.randn(43, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    hv32 = hvp_fn(loss32, params32)(v)
    assert hv32.dtype == torch.float64
    assert_close(hv32, h @ v, rtol=1e-4, atol=1e-5)
    est32 = hessian_extremes(loss32, params32, n_iter=43, seed=0)
    est64 = hessian_extremes(loss64, params64, n_iter=43, seed=0)
    assert est32.lambda_max == pytest.approx(est64.lambda_max, rel=1e-4)
    assert est32.converged_max


def test_hvp_calls_loss_fn_once_and_works_under_no_grad():
    loss_fn, params, _ = quadratic(n=10)
    calls = []

    def counted():
        calls.append(1)
        return loss_fn()

    with torch.no_grad():
        hvp = hvp_fn(counted, params)
        for _ in range(5):
            hvp(torch.ones(10, dtype=torch.float64))
    assert len(calls) == 1  # the first-order graph is cached


def test_unused_and_linear_parameters_get_zero_rows():
    x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    lin = torch.tensor([3.0], dtype=torch.float64, requires_grad=True)  # enters linearly
    unused = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    hvp = hvp_fn(lambda: (x**2).sum() + 5.0 * lin.sum(), [x, lin, unused])
    assert_close(
        hvp(torch.ones(5, dtype=torch.float64)),
        torch.tensor([2.0, 2.0, 0.0, 0.0, 0.0], dtype=torch.float64),
    )
    # A loss linear in all its parameters has H = 0.
    zero = hvp_fn(lambda: 5.0 * lin.sum(), [lin])
    assert_close(zero(torch.ones(1)), torch.zeros(1, dtype=torch.float64), atol=0)


def test_bad_inputs_raise():
    loss_fn, params, _ = quadratic(n=10)
    with pytest.raises(ValueError, match="require grad"):
        hvp_fn(loss_fn, [params[0].detach()])
    with pytest.raises(ValueError, match="scalar"):
        hvp_fn(lambda: params[0] * 2, params)
    with pytest.raises(ValueError, match="shape"):
        hvp_fn(loss_fn, params)(torch.ones(11, dtype=torch.float64))
    with pytest.raises(ValueError, match="method"):
        hessian_extremes(loss_fn, params, n_iter=5, seed=0, method="arnoldi")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu():
    loss_cpu, params_cpu, _ = quadratic()
    loss_gpu, params_gpu, a = quadratic(device="cuda")
    hv = hvp_fn(loss_gpu, params_gpu)(torch.ones(60, dtype=torch.float64, device="cuda"))
    assert hv.device.type == "cuda"
    assert_close(hv.cpu(), (a @ torch.ones(60, dtype=a.dtype, device="cuda")).cpu())
    cpu = hessian_extremes(loss_cpu, params_cpu, n_iter=60, seed=0)
    gpu = hessian_extremes(loss_gpu, params_gpu, n_iter=60, seed=0)
    assert gpu.lambda_max == pytest.approx(cpu.lambda_max, abs=1e-9)
    assert gpu.lambda_min == pytest.approx(cpu.lambda_min, abs=1e-9)
    assert gpu.converged_max and gpu.converged_min


def hessian_config(**changes):
    """The fixture config's `diagnostics.hessian`, typed as `config.load` builds it."""
    return replace(Diagnostics.from_raw(fixture_config()["diagnostics"]).hessian, **changes)


def test_checkpoint_estimates_share_one_graph_and_equal_the_single_method_calls():
    loss_fn, params, _ = quadratic(seed=5)
    calls = []

    def counted():
        calls.append(1)
        return loss_fn()

    cfg = hessian_config(n_iter=40, power_n_iter=60, power_cos=None, power_shift_offset=0.0)
    both = checkpoint_estimates(counted, params, cfg, seed=2)
    assert len(calls) == 1  # one first-order graph for both estimators
    assert list(both) == ["lanczos", "power"]  # config's order
    tol = cfg.tol
    assert both["lanczos"] == hessian_extremes(loss_fn, params, n_iter=40, seed=2, tol=tol)
    assert both["power"] == hessian_extremes(
        loss_fn, params, n_iter=60, seed=2, method="power", tol=tol
    )
    with pytest.raises(ValueError, match="diagnostics.hessian.methods.*'arnoldi'"):
        checkpoint_estimates(loss_fn, params, hessian_config(methods=("arnoldi",)), seed=0)


def test_power_estimator_is_the_authors():
    """The power estimator reaches extremes_by_power with the author's |cos| exit, floor
    and shift."""
    loss_fn, params, a = quadratic(seed=5)
    cfg = hessian_config(
        power_n_iter=50,
        power_min_iter=10,
        power_cos=0.9999,
        power_shift_offset=1.0,
        methods=("power",),
    )
    rule = author_power_rule(cfg)
    assert rule == {"cos_tol": 0.9999, "min_iter": 10, "shift_offset": 1.0}
    got = checkpoint_estimates(loss_fn, params, cfg, seed=2)["power"]
    want = extremes_by_power(lambda v: a @ v, a.shape[0], n_iter=50, seed=2, tol=cfg.tol, **rule)
    assert got.lambda_max == pytest.approx(want.lambda_max, rel=1e-9)
    assert got.lambda_min == pytest.approx(want.lambda_min, rel=1e-9, abs=1e-12)
    assert (got.n_iter_max, got.n_iter_min) == (want.n_iter_max, want.n_iter_min)
    assert 10 <= got.n_iter_max <= 50
    # without power_cos (and no offset given): our residual rule, no shift beyond lambda_max
    ours = replace(cfg, power_cos=None, power_shift_offset=0.0)
    assert author_power_rule(ours) == {"shift_offset": 0.0}


def test_checkpoint_rows_are_rows_of_hessian_csv():
    """One row per estimator, in config's order, with hessian.csv's columns."""
    loss_fn, params, _ = quadratic(seed=5)
    both = checkpoint_estimates(loss_fn, params, hessian_config(), seed=2)
    rows = checkpoint_rows("r", 10, 400, 200, 0.5, "plateau", both)
    assert [list(r) for r in rows] == [HESSIAN_COLUMNS] * 2
    assert [r["method"] for r in rows] == ["lanczos", "power"]
    assert rows[0]["lambda_max"] == both["lanczos"].lambda_max
    assert rows[0]["n_iter_max"] is None  # one Lanczos iteration gives both ends
    assert rows[1]["n_iter_max"] == both["power"].n_iter_max
    assert rows[1]["anisotropy"] == both["power"].anisotropy


def test_registering_an_estimator_twice_is_refused():
    with pytest.raises(ValueError, match="'lanczos'.*registered already"):
        estimator("lanczos")(lambda *a, **k: None)
