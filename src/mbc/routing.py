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

from mbc.metrics import EvalBatch, token_loss

ATTENTION_COLUMNS = ["run_id", "k", "tau", "phase", "step", "layer", "head", "attn_to_z"]
ABLATION_COLUMNS = [
    "run_id", "k", "tau", "phase", "step", "layer", "head", "kind", "delta_loss", "delta_delta_z",
]  # fmt: skip

ROUTING_HEAD_COLUMNS = [
    "run_id", "k", "tau", "routing_head", "routing_head_delta_delta_z", "attn_head",
]  # fmt: skip


@torch.no_grad()
def attention_to_z(model, batch: EvalBatch) -> torch.Tensor:
    """(n_layers, n_heads) mean attention mass on the z positions from the first-prediction query."""
    task = batch.task
    clean = batch.candidates.view(batch.n_contexts, task.k, -1)[
        torch.arange(batch.n_contexts), batch.target
    ]
    pats = model.attention_patterns(clean)  # per layer (n, h, T-1, T-1)
    q, z = task.first_pred_pos, list(task.z_positions)
    return torch.stack([p[:, :, q, z].sum(-1).mean(0) for p in pats]).cpu()


def clean_sequences(batch: EvalBatch) -> torch.Tensor:
    k = batch.task.k
    return batch.candidates.view(batch.n_contexts, k, -1)[
        torch.arange(batch.n_contexts), batch.target
    ]


@torch.no_grad()
def ablations(model, batch: EvalBatch) -> list[tuple[int, int, str, float, float]]:
    """(layer, head, kind, delta_loss, delta_delta_z) for every head and ablation kind."""
    clean = clean_sequences(batch)
    n_layers, n_heads = model.spec.n_layers, model.spec.n_heads

    def measure(scale=None, replace=None):
        lc = token_loss(model, clean, head_scale=scale, head_replace=replace)
        ls = token_loss(model, batch.shuffled, head_scale=scale, head_replace=replace)
        return float(lc), float(ls - lc)

    base_loss, base_dz = measure()
    means = torch.stack([z.mean(0) for z in model.head_outputs(clean)])  # (L, H, T-1, d_head)
    out = []
    for layer in range(n_layers):
        for head in range(n_heads):
            scale = torch.ones(n_layers, n_heads, device=clean.device)
            scale[layer, head] = 0
            keep_one = torch.ones_like(scale)
            keep_one[layer] = 0
            keep_one[layer, head] = 1
            for kind, s, r in (
                ("zero", scale, None),
                ("mean", scale, means),
                ("sufficiency", keep_one, means),
            ):
                loss, dz = measure(s, r)
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
