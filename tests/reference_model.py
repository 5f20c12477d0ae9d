"""A textbook forward of `mbc.training.model.Transformer` for tests: every position through every
block, attention as softmax(q k^T / sqrt(d_head)) with a causal mask, then the target rows.
Written independently of the model's own (pruned, CPU-laid-out) forward, from its weights."""

import math

import torch
import torch.nn.functional as F


def reference_logits(model, tokens: torch.Tensor, head_scale=None) -> torch.Tensor:
    """Logits (n, n_targets, vocab); head_scale (n_layers, n_heads): 0 zeroes a head's z."""
    w = dict(model.named_parameters())
    spec = model.spec
    h, d = spec.n_heads, spec.d_model
    x_in = tokens[:, :-1]
    n, t = x_in.shape
    x = w["tok_emb.weight"][x_in] + w["pos_emb.weight"][:t]

    def ln(y, name):
        return F.layer_norm(y, (d,), w[f"{name}.weight"], w[f"{name}.bias"])

    for i in range(spec.n_layers):
        b = f"blocks.{i}"
        qkv = ln(x, f"{b}.ln1") @ w[f"{b}.attn.qkv.weight"].T + w[f"{b}.attn.qkv.bias"]
        q, k, v = (u.reshape(n, t, h, d // h).transpose(1, 2) for u in qkv.split(d, dim=-1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // h)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        z = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v  # (n, h, t, dh)
        if head_scale is not None:
            z = z * head_scale[i].view(1, h, 1, 1)
        a = z.transpose(1, 2).reshape(n, t, d) @ w[f"{b}.attn.out.weight"].T
        x = x + a + w[f"{b}.attn.out.bias"]
        m = F.gelu(ln(x, f"{b}.ln2") @ w[f"{b}.mlp.0.weight"].T + w[f"{b}.mlp.0.bias"])
        x = x + m @ w[f"{b}.mlp.2.weight"].T + w[f"{b}.mlp.2.bias"]
    x = ln(x, "ln_f")[:, model.task.first_pred_pos :]
    return x @ w["unembed.weight"].T + w["unembed.bias"]
