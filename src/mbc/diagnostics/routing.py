"""Selector-routing head (docs/method.md#routing-head): attention to z and per-head ablations
at three phases.

From the position that predicts A's first token, how much attention each head pays to
the z positions; and what zero-ablation, mean-ablation or keeping a single head of a layer
(mean-ablating the others) does to the clean loss and to the z-shuffle gap delta_z.
Layers and heads are 0-indexed (the paper's head is L0H3).
"""

from __future__ import annotations

import pandas as pd
import torch

from mbc.training.metrics import EvalBatch, token_loss

ATTENTION_COLUMNS = ["run_id", "k", "tau", "phase", "step", "layer", "head", "attn_to_z"]
ABLATION_COLUMNS = [
    "run_id",
    "k",
    "tau",
    "phase",
    "step",
    "layer",
    "head",
    "kind",
    "delta_loss",
    "delta_delta_z",
]

ROUTING_HEAD_COLUMNS = [
    "run_id",
    "k",
    "tau",
    "routing_head",
    "routing_head_delta_delta_z",
    "attn_head",
]


def clean_sequences(batch: EvalBatch) -> torch.Tensor:
    k = batch.task.k
    return batch.candidates.view(batch.n_contexts, k, -1)[
        torch.arange(batch.n_contexts), batch.target
    ]


def _layers(model, point: str) -> list[str]:
    return [f"blocks.{i}.attn.{point}" for i in range(model.spec.n_layers)]


@torch.no_grad()
def attention_to_z(model, batch: EvalBatch) -> torch.Tensor:
    """(n_layers, n_heads) mean attention mass on the z positions from the first-prediction query."""
    pats: list[torch.Tensor] = []  # per layer (n, h, T-1, T-1), read at hook_pattern
    model(
        clean_sequences(batch),
        hooks=dict.fromkeys(_layers(model, "hook_pattern"), pats.append),
        all_positions=True,
    )
    q, z = batch.task.first_pred_pos, list(batch.task.z_positions)
    return torch.stack([p[:, :, q, z].sum(-1).mean(0) for p in pats]).cpu()


def _replace_heads(scale: torch.Tensor, base: torch.Tensor | None):
    """A hook_z that keeps head h where scale[h] = 1 and puts base (zeros when None) where
    scale[h] = 0."""

    def hook(z: torch.Tensor) -> torch.Tensor:
        s = scale.view(1, -1, 1, 1).to(z.dtype)
        return s * z + (1 - s) * (0.0 if base is None else base.unsqueeze(0).to(z.dtype))

    return hook


@torch.no_grad()
def ablations(model, batch: EvalBatch) -> list[tuple[int, int, str, float, float]]:
    """(layer, head, kind, delta_loss, delta_delta_z) for every head and ablation kind.

    zero: the head's output z replaced by 0; mean: by its mean over the batch's clean
    sequences (per position); sufficiency: every other head of the layer mean-ablated.
    """
    clean = clean_sequences(batch)
    n_layers, n_heads = model.spec.n_layers, model.spec.n_heads

    def measure(hooks=None):
        lc = token_loss(model, clean, hooks=hooks)
        ls = token_loss(model, batch.shuffled, hooks=hooks)
        return float(lc), float(ls - lc)

    base_loss, base_dz = measure()
    names = _layers(model, "hook_z")
    z_out: list[torch.Tensor] = []  # per layer (n, h, t_q, d_head), read at hook_z
    model(clean, hooks=dict.fromkeys(names, z_out.append))
    means = [z.mean(0) for z in z_out]  # per layer (h, t_q, d_head)
    out = []
    for layer in range(n_layers):
        for head in range(n_heads):
            drop = torch.ones(n_heads, device=clean.device)
            drop[head] = 0
            keep_one = 1 - drop
            for kind, s, r in (
                ("zero", drop, None),
                ("mean", drop, means[layer]),
                ("sufficiency", keep_one, means[layer]),
            ):
                loss, dz = measure({names[layer]: _replace_heads(s, r)})
                out.append((layer, head, kind, loss - base_loss, dz - base_dz))
    return out


def top_head(ablation: pd.DataFrame, attention: pd.DataFrame, phase: str = "mid") -> dict:
    """The head whose zero-ablation removes most of delta_z, and the most z-attending head."""
    out = {"routing_head": None, "routing_head_delta_delta_z": float("nan"), "attn_head": None}
    z = ablation[(ablation.phase == phase) & (ablation.kind == "zero")]
    if not z.empty:
        r = z.loc[z.delta_delta_z.idxmin()]
        out["routing_head"] = f"L{int(r['layer'])}H{int(r['head'])}"
        out["routing_head_delta_delta_z"] = float(r.delta_delta_z)
    a = attention[attention.phase == phase]
    if not a.empty:
        r = a.loc[a.attn_to_z.idxmax()]
        out["attn_head"] = f"L{int(r['layer'])}H{int(r['head'])}"
    return out
