"""Models (docs/method.md#model): a pre-LayerNorm decoder-only transformer and the E13 linear
baseline.

Both map full sequences (N, T) to logits at the target-predicting positions only,
(N, n_targets, vocab): the loss never looks at other positions, so we never unembed them.
Per-head outputs (before the output projection, TransformerLens' `hook_z`) can be scaled
or replaced for ablations through `head_scale` / `head_replace`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mbc.spec import A_LEN, B_LEN, VOCAB, ModelSpec, TaskSpec


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


class CausalSelfAttention(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.n_heads, self.d_head = spec.n_heads, spec.d_head
        self.qkv = nn.Linear(spec.d_model, 3 * spec.d_model)
        self.out = nn.Linear(spec.d_model, spec.d_model)

    def forward(
        self,
        x: torch.Tensor,
        head_scale: torch.Tensor | None = None,
        head_replace: torch.Tensor | None = None,
        want_pattern: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        n, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        # (n, t, d) -> (n, heads, t, d_head)
        q, k, v = (y.view(n, t, self.n_heads, self.d_head).transpose(1, 2) for y in (q, k, v))
        pattern = None
        if want_pattern:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(self.d_head)
            causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            pattern = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)  # (n, h, t, t)
            z = pattern @ v
        else:
            z = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        # z: (n, heads, t, d_head), the per-head outputs
        if head_scale is not None:
            s = head_scale.view(1, -1, 1, 1).to(z.dtype)
            base = 0.0 if head_replace is None else head_replace.unsqueeze(0).to(z.dtype)
            z = s * z + (1 - s) * base  # 0 = replaced (zero- or mean-ablated), 1 = intact
        z = z.transpose(1, 2).reshape(n, t, d)
        return self.out(z), pattern


class Block(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.ln1 = nn.LayerNorm(spec.d_model)
        self.attn = CausalSelfAttention(spec)
        self.ln2 = nn.LayerNorm(spec.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(spec.d_model, spec.d_mlp), nn.GELU(), nn.Linear(spec.d_mlp, spec.d_model)
        )

    def forward(self, x, head_scale=None, head_replace=None, want_pattern=False):
        a, pattern = self.attn(self.ln1(x), head_scale, head_replace, want_pattern)
        x = x + a
        return x + self.mlp(self.ln2(x)), pattern


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

    def residual(self, tokens, head_scale=None, head_replace=None, want_pattern=False):
        """Run the blocks on tokens[:, :-1]; returns final residual (n, t, d) and patterns."""
        x_in = tokens[:, :-1]
        t = x_in.shape[1]
        x = self.tok_emb(x_in) + self.pos_emb.weight[:t]
        patterns = []
        for layer, block in enumerate(self.blocks):
            x, p = block(
                x,
                None if head_scale is None else head_scale[layer],
                None if head_replace is None else head_replace[layer],
                want_pattern,
            )
            patterns.append(p)
        return x, patterns

    def forward(
        self,
        tokens: torch.Tensor,
        *,
        head_scale: torch.Tensor | None = None,
        head_replace: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """tokens (n, T) -> logits (n, n_targets, vocab) at the target-predicting positions.

        head_scale: (n_layers, n_heads), 1 keeps a head, 0 replaces its output by
        head_replace (n_layers, n_heads, T-1, d_head), or by zeros when that is None.
        """
        x, _ = self.residual(tokens, head_scale, head_replace)
        x = x[:, self.task.first_pred_pos :]  # (n, n_targets, d)
        return self.unembed(self.ln_f(x))

    def head_outputs(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        """Per-layer per-head outputs z (n, heads, T-1, d_head), read at the output projection."""
        outs: list[torch.Tensor] = []
        hooks = [
            b.attn.out.register_forward_pre_hook(lambda m, args: outs.append(args[0]))
            for b in self.blocks
        ]
        try:
            self.residual(tokens)
        finally:
            for h in hooks:
                h.remove()
        n, t, _ = outs[0].shape
        return [o.view(n, t, self.spec.n_heads, self.spec.d_head).transpose(1, 2) for o in outs]

    def attention_patterns(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        """Per-layer attention patterns (n, heads, T-1, T-1)."""
        _, patterns = self.residual(tokens, want_pattern=True)
        return patterns


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
