"""Models (docs/method.md#model): a pre-LayerNorm decoder-only transformer and the E13 linear
baseline.

Both map full sequences (N, T) to logits at the target-predicting positions only,
(N, n_targets, vocab): the loss never looks at other positions, so we never unembed them.
The transformer has one forward, used by training, evaluation and every diagnostic; its
hook points (TransformerLens' names: `blocks.<i>.attn.hook_z`, `...hook_pattern`) serve the
routing head's attention read-out and ablations. Attention is SDPA on CUDA and, on the CPU,
an explicit formula laid out for this sequence length (`attend`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from mbc.core.spec import A_LEN, B_LEN, VOCAB, ModelSpec, TaskSpec


def init_weights(model: nn.Module, std: float) -> None:
    """ModelSpec.init: every Linear/Embedding weight ~ N(0, std), every bias 0, LayerNorm 1/0.

    The author's TransformerLens model draws W_E, W_pos, W_Q, W_K, W_V, W_O, W_in, W_out and
    W_U alike (no residual-branch rescaling); our fused qkv holds W_Q, W_K, W_V side by side.
    """
    for m in model.modules():
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, std=std)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
        if isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def use_sdpa(device: torch.device) -> bool:
    """SDPA's fused kernels win on CUDA; on CPU at T = 15 the plain formula is faster."""
    return device.type == "cuda"


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offset: int, sdpa: bool,
    want_pattern: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
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


Hooks = Mapping[str, Callable[[torch.Tensor], "torch.Tensor | None"]]


class CausalSelfAttention(nn.Module):
    """Multi-head causal attention with TransformerLens' hook points `hook_pattern` (read the
    attention pattern) and `hook_z` (read or replace the per-head outputs before W_O)."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.n_heads, self.d_head = spec.n_heads, spec.d_head
        self.qkv = nn.Linear(spec.d_model, 3 * spec.d_model)
        self.out = nn.Linear(spec.d_model, spec.d_model)

    def heads(self, y: torch.Tensor) -> torch.Tensor:
        n, t, d = y.shape
        return y.view(n, t, self.n_heads, self.d_head).transpose(1, 2)

    def project(self, y: torch.Tensor, first: int = 0):
        """q (queries at positions first..), k, v (all positions) per head from the normed
        residual y (n, t, d). first > 0 skips the query rows nobody reads."""
        d = y.shape[-1]
        if first == 0:
            return tuple(self.heads(u) for u in self.qkv(y).split(d, dim=2))
        w, b = self.qkv.weight, self.qkv.bias
        q = self.heads(F.linear(y[:, first:], w[:d], b[:d]))
        k, v = (self.heads(u) for u in F.linear(y, w[d:], b[d:]).split(d, dim=2))
        return q, k, v

    def output(self, z: torch.Tensor) -> torch.Tensor:
        """W_O applied to the per-head outputs z (n, h, t, d_head): (n, t, d)."""
        n, h, t, dh = z.shape
        return self.out(z.transpose(1, 2).reshape(n, t, h * dh))

    def forward(
        self, y: torch.Tensor, first: int = 0, hooks: Hooks | None = None, name: str = ""
    ) -> torch.Tensor:
        q, k, v = self.project(y, first)
        on_pattern = hooks.get(f"{name}hook_pattern") if hooks else None
        z, pattern = attend(q, k, v, first, use_sdpa(y.device), on_pattern is not None)
        if on_pattern is not None:
            on_pattern(pattern)
        on_z = hooks.get(f"{name}hook_z") if hooks else None
        if on_z is not None and (changed := on_z(z)) is not None:
            z = changed
        return self.output(z)


class Block(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.ln1 = nn.LayerNorm(spec.d_model)
        self.attn = CausalSelfAttention(spec)
        self.ln2 = nn.LayerNorm(spec.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(spec.d_model, spec.d_mlp), nn.GELU(), nn.Linear(spec.d_mlp, spec.d_model)
        )

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.ln2(x))

    def forward(self, x, first: int = 0, hooks: Hooks | None = None, name: str = ""):
        """The block on residual x (n, t, d); first > 0 returns positions first.. only."""
        a = self.attn(self.ln1(x), first, hooks, f"{name}attn.")
        x = (x[:, first:] if first else x) + a
        return x + self.feed_forward(x)


class Transformer(nn.Module):
    """Pre-LN decoder, learned absolute positions, untied unembedding with bias."""

    def __init__(self, spec: ModelSpec, task: TaskSpec):
        super().__init__()
        if task.seq_len - 1 > spec.n_positions:
            raise ValueError(
                f"sequence length {task.seq_len} exceeds n_positions {spec.n_positions}"
            )
        self.spec, self.task = spec, task
        self.tok_emb = nn.Embedding(VOCAB, spec.d_model)
        self.pos_emb = nn.Embedding(spec.n_positions, spec.d_model)
        self.blocks = nn.ModuleList(Block(spec) for _ in range(spec.n_layers))
        self.ln_f = nn.LayerNorm(spec.d_model)
        self.unembed = nn.Linear(spec.d_model, VOCAB)
        init_weights(self, spec.weight_std)

    def forward(
        self, tokens: torch.Tensor, *, hooks: Hooks | None = None, all_positions: bool = False
    ) -> torch.Tensor:
        """tokens (n, T) -> logits (n, n_targets, vocab) at the target-predicting positions.

        Only those positions reach the loss, so the last block runs queries, W_O and the MLP
        there alone (keys and values everywhere): 14% fewer FLOPs per step at the paper's
        shape, exact in real arithmetic. all_positions=True: logits (n, T-1, vocab).
        hooks: {"blocks.<i>.attn.hook_z" or "...hook_pattern": fn}; fn(z) may return a
        replacement z (n, heads, t_q, d_head) for the queries' positions, fn(pattern) reads
        (n, heads, t_q, t_k). Without hooks nothing is looked up.
        """
        x_in = tokens[:, :-1]
        t = x_in.shape[1]
        x = self.tok_emb(x_in) + self.pos_emb.weight[:t]
        p = 0 if all_positions else self.task.first_pred_pos
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            x = block(x, p if i == last else 0, hooks, f"blocks.{i}.")
        if not self.blocks:
            x = x[:, p:]
        return self.unembed(self.ln_f(x))


class LinearBaseline(nn.Module):
    """E13: two stacked linear maps on one-hot [B; z] (no nonlinearity), one softmax per target.

    It predicts all target tokens at once from the input, so it can represent only
    what a linear function of (B, z) can: E13's test (docs/method.md#e13) of whether depth and
    nonlinearity are needed for the conditional.
    """

    def __init__(self, spec: ModelSpec, task: TaskSpec):
        super().__init__()
        if task.direction != "bz_to_a":
            raise ValueError("the linear baseline is defined for the bz_to_a task only")
        self.spec, self.task = spec, task
        self.n_in = B_LEN + task.z_length
        self.w1 = nn.Linear(self.n_in * VOCAB, spec.linear_hidden)
        self.w2 = nn.Linear(spec.linear_hidden, task.n_targets * VOCAB)
        assert task.n_targets == A_LEN + 1
        # the transformer's rule with the hidden width as the residual width:
        # N(0, 0.8 / sqrt(linear_hidden)) under transformer_lens, biases 0
        init_weights(self, spec.weight_std)

    def forward(self, tokens: torch.Tensor, **_: object) -> torch.Tensor:
        b = tokens[:, 1 : 1 + B_LEN]
        z = tokens[:, 2 + B_LEN : 2 + B_LEN + self.task.z_length]
        x = F.one_hot(torch.cat([b, z], dim=1), VOCAB).flatten(1).to(self.w1.weight.dtype)
        return self.w2(self.w1(x)).view(-1, self.task.n_targets, VOCAB)


def build_model(spec: ModelSpec, task: TaskSpec, generator: torch.Generator) -> nn.Module:
    """Construct and initialise a model from an explicit generator (no global seeding)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
        model = (
            Transformer(spec, task) if spec.kind == "transformer" else LinearBaseline(spec, task)
        )
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
