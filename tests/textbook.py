"""A run trained the textbook way: the independent reference the one training step
(`mbc.training.packed.PackedRuns.step`, packs of one and of many) is checked against."""

from typing import NamedTuple

import torch
import torch.nn.functional as F

from mbc.training.data import BatchOrder
from mbc.training.schedule import learning_rate
from mbc.training.setup import initial_model


class Textbook(NamedTuple):
    losses: list[float]  # per step
    first_losses: list[float]  # the batch's first-target cross-entropy, per step
    grad_norms: list[float]  # before clipping
    model: torch.nn.Module
    opt: torch.optim.Optimizer


def textbook_run(spec, ds, steps: int, fused: bool = False) -> Textbook:
    """An ordinary model at the run's initial weights; the mean cross-entropy over the
    target positions; torch's AdamW (its default implementation; fused: its fused one, as
    the trainer builds it); the lr of the run's schedule at each step; torch's
    `clip_grad_norm_` when train.clip_norm > 0; under train.precision bf16,
    `torch.autocast` to bf16 around the forward."""
    t, n_t = spec.train, spec.task.n_targets
    model = initial_model(spec).train()
    opt = torch.optim.AdamW(
        model.parameters(),
        lr=t.lr,
        betas=(t.beta1, t.beta2),
        eps=t.eps,
        weight_decay=t.weight_decay,
        fused=fused or None,
    )
    order = BatchOrder(ds.tokens.shape[0], t.batch_size, spec.seed, torch.device("cpu"))
    losses, firsts, norms = [], [], []
    for step in range(1, steps + 1):
        x = ds.tokens[order.indices(step)]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=t.precision == "bf16"):
            logits = model(x).float()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, -n_t:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        norms.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))
        if t.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), t.clip_norm)
        for group in opt.param_groups:
            group["lr"] = learning_rate(t, step)
        opt.step()
        losses.append(loss.item())
        firsts.append(float(F.cross_entropy(logits[:, 0].detach(), x[:, -n_t])))
    return Textbook(losses, firsts, norms, model, opt)
