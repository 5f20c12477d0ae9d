"""AdamW over the stacked (R, ...) parameters of a pack (`mbc.training.packed`) whose runs
have different hyperparameters (an lr sweep, a warmup schedule at another lr)."""

from __future__ import annotations

import torch


class PackedAdamW:
    """AdamW over stacked (R, ...) tensors with per-run hyperparameters.

    The same update as `torch.optim.AdamW` (decoupled decay, bias correction), written
    with broadcasting so that run r uses lr[r], weight_decay[r], betas[r], eps[r].
    """

    def __init__(self, params, lr, betas, eps, weight_decay):
        self.params = list(params)
        dev = self.params[0].device
        self._col = lambda v: torch.as_tensor(v, dtype=torch.float64, device=dev)  # noqa: E731
        col = self._col
        self.lr, self.eps, self.wd = col(lr), col(eps), col(weight_decay)
        self.b1, self.b2 = col([b[0] for b in betas]), col([b[1] for b in betas])
        self.t = 0
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None if set_to_none else (p.grad.zero_() if p.grad is not None else None)

    def set_lr(self, lr: list[float]) -> None:
        self.lr = self._col(lr)

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        t = self.t
        bc1 = 1 - self.b1**t
        bc2_sqrt = (1 - self.b2**t).sqrt()
        for p, m, v in zip(self.params, self.m, self.v, strict=True):
            if p.grad is None:
                continue

            def f(x: torch.Tensor, p: torch.Tensor = p) -> torch.Tensor:
                return x.to(p.dtype).view((-1,) + (1,) * (p.dim() - 1))

            g = p.grad
            p.mul_(f(1 - self.lr * self.wd))
            m.lerp_(g, f(1 - self.b1))
            v.mul_(f(self.b2)).addcmul_(g * g, f(1 - self.b2))
            denom = (v.sqrt() / f(bc2_sqrt)).add_(f(self.eps))
            p.add_(m / denom * f(-self.lr / bc1))

    def run_state(self, r: int) -> dict[int, dict[str, torch.Tensor]]:
        return {
            i: {
                "step": torch.tensor(float(self.t)),
                "exp_avg": m[r].clone(),
                "exp_avg_sq": v[r].clone(),
            }
            for i, (m, v) in enumerate(zip(self.m, self.v, strict=True))
        }
