"""The transformer's one forward (docs/method.md#model), over one run's weights or over R
runs' stacked weights: what training, packed training and every evaluation run.

One run: tokens (n, T), weights by `Transformer` parameter name with their own shapes
(`Transformer.forward` hands over its parameters). R runs (`mbc.training.packed`): tokens
(R, n, T), each weight (R, ...) with the run axis first; every linear layer is then one
`torch.baddbmm` over the R weight matrices and attention one call over R * n sequences.
Both take the same steps: pre-LayerNorm blocks, the last block at the target-predicting
positions only (`first`), attention by `attend`, TransformerLens' hook
points. A linear layer computes in its weight's dtype, so bf16 copies of the linear
layers' weights (`low`, train.precision bf16) put the matmuls in bf16, as `torch.autocast`
would; LayerNorm, the embeddings and the residual stream stay fp32.

`answers` is the in-loop evaluation's shared prefix (`mbc.training.metrics`): tokens are
then each context's prefix up to its first target-predicting position, answers its K
candidate answers, and the answer positions of all K candidates run as one stream whose
attention reads the prefix's keys once (`attend_candidates`), never repeating the prefix.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F

Hooks = Mapping[str, Callable[[torch.Tensor], "torch.Tensor | None"]]
Weights = Mapping[str, torch.Tensor]


def use_sdpa(device: torch.device) -> bool:
    """SDPA's fused kernels win on CUDA; on CPU at T = 15 the plain formula is faster."""
    return device.type == "cuda"


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    offset: int,
    sdpa: bool,
    want_pattern: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Causal attention of queries at positions offset.. over keys at 0..: (z, pattern).

    q (n, h, tq, dh), k and v (n, h, tk, dh); z (n, h, tq, dh); the pattern (n, h, tq, tk) is
    returned only when asked for (SDPA never forms it).
    """
    tq, tk = q.shape[-2], k.shape[-2]
    if sdpa and not want_pattern:
        if offset == 0 and tq == tk:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True), None
        keep = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(offset)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep), None
    keep = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(offset)
    # Scores laid out keys-first, (.., tk, tq), so the softmax runs over dim -2: at T = 15
    # torch's CPU softmax over the last dim is ~2.5x slower than over an inner one, and
    # the transposes are free strides in the matmuls (attention 5.6 -> 3.0 ms fwd+bwd).
    att_t = (k @ q.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    att_t = att_t.masked_fill(~keep.T, float("-inf")).softmax(dim=-2)
    pattern = att_t.transpose(-2, -1)
    return pattern @ v, (pattern if want_pattern else None)


def attend_candidates(
    q: torch.Tensor,
    k_own: torch.Tensor,
    v_own: torch.Tensor,
    k_pre: torch.Tensor,
    v_pre: torch.Tensor,
    k: int,
) -> torch.Tensor:
    """Causal attention of the K candidates' answer positions of each context over the
    context's shared prefix and their own earlier answer positions.

    q, k_own, v_own: (n, h, K * t, dh), candidate-major (candidate c holds rows c*t ..
    c*t + t-1); k_pre, v_pre: (n, h, s, dh) the prefix. The prefix keys are used once per
    context (the K candidates are rows of one matrix product), never copied per
    candidate; the own-key part is a (t x t) causal block per candidate. One softmax
    over [prefix keys, own keys]. Returns (n, h, K * t, dh).
    """
    n, h, kt, dh = q.shape
    t = kt // k
    scale = 1.0 / math.sqrt(dh)
    s_pre = (q @ k_pre.transpose(-2, -1)) * scale  # (n, h, K t, s)
    q5, k5, v5 = (x.view(n, h, k, t, dh) for x in (q, k_own, v_own))
    s_own = (q5 @ k5.transpose(-2, -1)) * scale  # (n, h, K, t, t)
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    s_own = s_own.masked_fill(~causal, float("-inf"))
    s_pre5 = s_pre.view(n, h, k, t, -1)
    m = torch.maximum(s_pre5.amax(-1, keepdim=True), s_own.amax(-1, keepdim=True))
    e_pre, e_own = (s_pre5 - m).exp(), (s_own - m).exp()
    z = e_pre.sum(-1, keepdim=True) + e_own.sum(-1, keepdim=True)
    out = (e_pre.view(n, h, kt, -1) @ v_pre).view(n, h, k, t, dh) + e_own @ v5
    return (out / z).view(n, h, kt, dh)


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """x (..., f) through a linear layer w (out, f), or x (R, n, t, f) through R layers
    w (R, out, f), b (R, out); in w's dtype."""
    if w.dim() == 2:
        return F.linear(x.to(w.dtype), w, b)
    r, n, t, f = x.shape
    y = torch.baddbmm(b.unsqueeze(1), x.reshape(r, n * t, f).to(w.dtype), w.transpose(1, 2))
    return y.view(r, n, t, -1)


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if w.dim() == 1:
        return F.layer_norm(x, x.shape[-1:], w, b)
    return torch.addcmul(b[:, None, None], F.layer_norm(x, x.shape[-1:]), w[:, None, None])


def embed(w: Weights, tokens: torch.Tensor, positions: slice) -> torch.Tensor:
    """Token plus learned position embeddings: tokens (n, t) or (R, n, t) -> (..., t, d)."""
    emb, pos = w["tok_emb.weight"], w["pos_emb.weight"]
    if emb.dim() == 2:
        return F.embedding(tokens, emb) + pos[positions]
    r, vocab, d = emb.shape
    offsets = (torch.arange(r, device=tokens.device) * vocab).view(r, *[1] * (tokens.dim() - 1))
    x = F.embedding(tokens + offsets, emb.reshape(r * vocab, d))
    return x + pos[:, positions].view(r, *[1] * (tokens.dim() - 2), -1, d)


class _Layer:
    """Block i's weights and the steps the forward takes with them."""

    def __init__(self, w: Weights, i: int, n_heads: int):
        self.w, self.pre, self.h = w, f"blocks.{i}.", n_heads

    def __call__(self, name: str) -> torch.Tensor:
        return self.w[self.pre + name]

    def heads(self, y: torch.Tensor) -> torch.Tensor:
        """(..., t, d) -> (prod(...), h, t, d / h): one or R * n sequences of heads."""
        t, d = y.shape[-2:]
        return y.reshape(-1, t, self.h, d // self.h).transpose(1, 2)

    def project(self, y: torch.Tensor, first: int = 0):
        """q (queries at positions first..), k, v (all positions) per head from the normed
        residual y; first > 0 skips the query rows nobody reads."""
        w, b = self("attn.qkv.weight"), self("attn.qkv.bias")
        d = y.shape[-1]
        if first == 0:
            return tuple(self.heads(u) for u in linear(y, w, b).split(d, dim=-1))
        q = self.heads(linear(y[..., first:, :], w[..., :d, :], b[..., :d]))
        k, v = (self.heads(u) for u in linear(y, w[..., d:, :], b[..., d:]).split(d, dim=-1))
        return q, k, v

    def output(self, z: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """W_O on the per-head outputs z (prod(...), h, t, d_head), shaped as `like`'s
        leading dims: (..., t, d)."""
        _, h, t, dh = z.shape
        z = z.transpose(1, 2).reshape(*like.shape[:-2], t, h * dh)
        return linear(z, self("attn.out.weight"), self("attn.out.bias"))

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        y = layer_norm(x, self("ln2.weight"), self("ln2.bias"))
        hid = F.gelu(linear(y, self("mlp.0.weight"), self("mlp.0.bias")))
        return linear(hid, self("mlp.2.weight"), self("mlp.2.bias"))

    def ln1(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, self("ln1.weight"), self("ln1.bias"))


def forward(
    w: Weights,
    tokens: torch.Tensor,
    spec,
    first: int,
    *,
    hooks: Hooks | None = None,
    answers: torch.Tensor | None = None,
) -> torch.Tensor:
    """Logits at the positions first.. of the last block (the target-predicting positions
    when first is the task's first_pred_pos; 0: every position): tokens (n, T) ->
    (n, T - 1 - first, vocab), or stacked (R, n, T) -> (R, n, ...).

    hooks: {"blocks.<i>.attn.hook_z" or "...hook_pattern": fn}; fn(z) may return a
    replacement z (n, heads, t_q, d_head) for the queries' positions, fn(pattern) reads
    (n, heads, t_q, t_k) (R * n sequences for R runs). Without hooks nothing is looked up.
    answers (n, K, n_t) (or (R, n, K, n_t)): the shared-prefix evaluation; tokens (n, p + 1)
    are then the prefixes up to the first target-predicting position p, and the result is
    the logits (n, K, n_t, vocab) of every candidate's targets.
    """
    sdpa = use_sdpa(tokens.device)
    if answers is None:
        x = embed(w, tokens[..., :-1], slice(0, tokens.shape[-1] - 1))
    else:
        x = embed(w, tokens, slice(0, tokens.shape[-1]))
        p, (k, n_t) = tokens.shape[-1] - 1, answers.shape[-2:]
        # answer inputs (all but the last target token), candidate-major within a context
        xa = embed(w, answers[..., :-1], slice(p + 1, p + n_t)).flatten(-3, -2)
    last = spec.n_layers - 1
    for i in range(spec.n_layers):
        layer = _Layer(w, i, spec.n_heads)
        off = first if i == last and answers is None else 0
        q, kk, v = layer.project(layer.ln1(x), off)
        name = f"blocks.{i}.attn."
        on_pattern = hooks.get(f"{name}hook_pattern") if hooks else None
        z, pattern = attend(q, kk, v, off, sdpa, on_pattern is not None)
        if on_pattern is not None:
            on_pattern(pattern)
        on_z = hooks.get(f"{name}hook_z") if hooks else None
        if on_z is not None and (changed := on_z(z)) is not None:
            z = changed
        if answers is not None:
            qa, ka, va = layer.project(layer.ln1(xa))
            xa = xa + layer.output(attend_candidates(qa, ka, va, kk, v, k), xa)
            xa = xa + layer.feed_forward(xa)
        x = (x[..., off:, :] if off else x) + layer.output(z, x)
        x = x + layer.feed_forward(x)
    if answers is not None:
        return _candidate_logits(w, x[..., p, :], xa, k)
    if spec.n_layers == 0:
        x = x[..., first:, :]
    return unembed(w, x)


def unembed(w: Weights, x: torch.Tensor) -> torch.Tensor:
    return linear(
        layer_norm(x, w["ln_f.weight"], w["ln_f.bias"]), w["unembed.weight"], w["unembed.bias"]
    )


def _candidate_logits(w: Weights, xp: torch.Tensor, xa: torch.Tensor, k: int) -> torch.Tensor:
    """Logits of every candidate's targets: position p (shared by a context's K
    candidates) then the answer positions p+1 .. : (..., n, K, n_t, vocab)."""
    first = unembed(w, xp.unsqueeze(-2))  # (..., n, 1, vocab)
    rest = unembed(w, xa)  # (..., n, K t, vocab)
    rest = rest.view(*rest.shape[:-2], k, -1, rest.shape[-1])
    first = first.unsqueeze(-3).expand(*rest.shape[:-2], 1, rest.shape[-1])
    return torch.cat([first, rest], dim=-2)
