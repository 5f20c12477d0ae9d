"""One pack's arithmetic, chosen once when it is built (`mbc.training.packed.PackedRuns`):
how its forward, loss, gradient norm and clipping compute.

`OrdinaryStep`: one run trained alone (`mbc.training.train.train_run`) computes with the
ordinary model's arithmetic: its forward gets the run's plain weights (`F.linear`,
`F.layer_norm`'s own affine, `F.embedding`), its loss is torch's mean cross-entropy and its
clipping torch's `clip_grad_norm_`, so it is bitwise the run of the ordinary model.
`StackedStep`: a pack job's runs take the stacked arithmetic (batched matmuls, per-run
reductions), equal to it to float32 rounding, from start to end: a pack that has shrunk
to one run (the others finished) keeps it, so a run's numbers never depend on when its
pack-mates stop.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F

from mbc.training.forward import forward, linear


class StepMath(Protocol):
    """The operations the two arithmetics compute differently. Tensors carry the run axis
    first (R, ...), R = 1 for `OrdinaryStep`."""

    def transformer(self, w: dict, tokens: torch.Tensor, spec, first_pred_pos: int) -> torch.Tensor:
        """`mbc.training.forward.forward` of the stacked weights `w` on tokens (R, n, T):
        logits (R, n, n_targets, vocab)."""

    def linear_baseline(self, w: dict, x: torch.Tensor) -> torch.Tensor:
        """The linear baseline's two maps of the stacked weights `w` on its input (R, n,
        n_in); reshaped to logits by the caller."""

    def losses(
        self, logits: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-run mean training loss (R,) and detached first-target loss (R,) of logits
        (R, n, n_targets, vocab) against targets (R, n, n_targets)."""

    def grad_norms(self, grads: list[torch.Tensor]) -> torch.Tensor:
        """Per-run global L2 norm (R,) of the stacked gradients."""

    def clip_coefficients(self, norms: torch.Tensor, clip: torch.Tensor) -> torch.Tensor:
        """clip / (norm + 1e-6) per run (R,) (torch's clip_grad_norm_; the caller clamps)."""


class OrdinaryStep:
    """One run alone: the ordinary model's arithmetic, bit for bit."""

    def __init__(self, clip_norm: float):
        self.clip_norm = clip_norm  # the spec's float: torch's clip multiplies by it

    def transformer(self, w, tokens, spec, first_pred_pos):
        return forward(_alone(w), tokens[0], spec, first_pred_pos)[None]

    def linear_baseline(self, w, x):
        w = _alone(w)
        return linear(linear(x[0], w["w1.weight"], w["w1.bias"]), w["w2.weight"], w["w2.bias"])

    def losses(self, logits, targets):
        # torch's mean reduction, as the ordinary model's loss
        x, y = logits[0], targets[0]
        loss = F.cross_entropy(x.reshape(-1, x.shape[-1]), y.reshape(-1))
        first = F.cross_entropy(x[:, 0].detach(), y[:, 0])
        return loss.view(1), first.view(1)

    def grad_norms(self, grads):
        # torch's clip_grad_norm_ formula: the norm of the per-tensor norms
        norms = torch.stack([torch.linalg.vector_norm(g) for g in grads])
        return torch.linalg.vector_norm(norms).view(1)

    def clip_coefficients(self, norms, clip):
        # as torch evaluates float / tensor
        return (norms + 1e-6).reciprocal() * self.clip_norm


class StackedStep:
    """R >= 1 runs of a pack: batched matmuls and per-run reductions over the run axis."""

    def transformer(self, w, tokens, spec, first_pred_pos):
        return forward(w, tokens, spec, first_pred_pos)

    def linear_baseline(self, w, x):
        h = linear(x.unsqueeze(2), w["w1.weight"], w["w1.bias"])
        return linear(h, w["w2.weight"], w["w2.bias"])

    def losses(self, logits, targets):
        r, n, n_t = targets.shape
        ce = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none"
        ).view(r, n, n_t)
        return ce.mean(dim=(1, 2)), ce[:, :, 0].detach().mean(dim=1)

    def grad_norms(self, grads):
        return torch.stack([g.flatten(1).pow(2).sum(1) for g in grads]).sum(0).sqrt()

    def clip_coefficients(self, norms, clip):
        return clip / (norms + 1e-6)


def _alone(w: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The weights of a pack of one as one run's (views, run axis dropped)."""
    return {n: t[0] for n, t in w.items()}
