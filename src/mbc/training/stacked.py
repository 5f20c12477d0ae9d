"""The transformer's forward over R stacked weight sets (the run axis first): what a pack of
R runs (`mbc.training.packed`) trains and evaluates with, one run being a pack of one.
Weights may be fp32 or, for the linear layers, bf16 copies (train.precision bf16): a
linear layer computes in its weight's dtype, everything else as `torch.autocast` would.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mbc.training.model import attend


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """x (R, n, t, f) through R linear layers w (R, out, f), b (R, out), in w's dtype."""
    r, n, t, f = x.shape
    y = torch.baddbmm(b.unsqueeze(1), x.reshape(r, n * t, f).to(w.dtype), w.transpose(1, 2))
    return y.view(r, n, t, -1)


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.addcmul(b[:, None, None], F.layer_norm(x, x.shape[-1:]), w[:, None, None])


def stacked_forward(
    w: dict[str, torch.Tensor], tokens: torch.Tensor, spec, task, sdpa: bool
) -> torch.Tensor:
    """`mbc.training.model.Transformer.forward` over R stacked weight sets w (by the
    Transformer's parameter names, each (R, ...)): tokens (R, n, T) -> logits
    (R, n, n_targets, vocab). The same steps: the last block at the target positions only,
    `mbc.training.model.attend`."""
    r, n, _ = tokens.shape
    d, p, h = spec.d_model, task.first_pred_pos, spec.n_heads

    def heads(y: torch.Tensor) -> torch.Tensor:  # (R, n, t, d) -> (R n, h, t, d / h)
        return y.reshape(r * n, y.shape[2], h, d // h).transpose(1, 2)

    x_in = tokens[:, :, :-1]
    t = x_in.shape[2]
    emb = w["tok_emb.weight"]  # (R, V, d)
    vocab = emb.shape[1]
    offsets = (torch.arange(r, device=tokens.device) * vocab).view(r, 1, 1)
    x = F.embedding(x_in + offsets, emb.reshape(r * vocab, d))
    x = x + w["pos_emb.weight"][:, None, :t]
    last = spec.n_layers - 1
    for i in range(spec.n_layers):
        blk = f"blocks.{i}."
        g = lambda name, blk=blk: w[blk + name]  # noqa: E731
        y = layer_norm(x, g("ln1.weight"), g("ln1.bias"))
        qkv_w, qkv_b = g("attn.qkv.weight"), g("attn.qkv.bias")
        if i < last:
            q, k, v = (heads(u) for u in linear(y, qkv_w, qkv_b).split(d, -1))
            off = 0
        else:  # only positions p.. reach the loss: queries, out-proj and MLP there only
            q = heads(linear(y[:, :, p:], qkv_w[:, :d], qkv_b[:, :d]))
            k, v = (heads(u) for u in linear(y, qkv_w[:, d:], qkv_b[:, d:]).split(d, -1))
            x, off = x[:, :, p:], p
        z, _ = attend(q, k, v, off, sdpa)
        z = z.transpose(1, 2).reshape(r, n, z.shape[2], d)
        x = x + linear(z, g("attn.out.weight"), g("attn.out.bias"))
        y = layer_norm(x, g("ln2.weight"), g("ln2.bias"))
        hid = F.gelu(linear(y, g("mlp.0.weight"), g("mlp.0.bias")))
        x = x + linear(hid, g("mlp.2.weight"), g("mlp.2.bias"))
    if spec.n_layers == 0:
        x = x[:, :, p:]
    y = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"])
    return linear(y, w["unembed.weight"], w["unembed.bias"])
