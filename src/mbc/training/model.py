"""Models (docs/method.md#model): a pre-LayerNorm decoder-only transformer and the E13 linear
baseline.

Both map full sequences (N, T) to logits at the target-predicting positions only,
(N, n_targets, vocab): the loss never looks at other positions, so we never unembed them.
The transformer's modules hold its weights (and their names: the state dict); its forward
is `mbc.training.forward`'s, the one forward of training, packed training, evaluation and
every diagnostic. Its hook points (TransformerLens' names: `blocks.<i>.attn.hook_z`,
`...hook_pattern`) serve the routing head's attention read-out and ablations.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mbc.core.spec import A_LEN, B_LEN, VOCAB, ModelSpec, TaskSpec
from mbc.training.forward import Hooks, forward


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
    """Multi-head causal attention's weights: W_Q, W_K, W_V fused (`qkv`) and W_O (`out`).
    The forward is `mbc.training.forward`'s, hook points `hook_pattern` and `hook_z`."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.qkv = nn.Linear(spec.d_model, 3 * spec.d_model)
        self.out = nn.Linear(spec.d_model, spec.d_model)


class Block(nn.Module):
    """A pre-LayerNorm block's weights (its forward: `mbc.training.forward`)."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.ln1 = nn.LayerNorm(spec.d_model)
        self.attn = CausalSelfAttention(spec)
        self.ln2 = nn.LayerNorm(spec.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(spec.d_model, spec.d_mlp), nn.GELU(), nn.Linear(spec.d_mlp, spec.d_model)
        )


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
        # (name, owning module, attribute) of every parameter: the forward's weights by
        # name, read afresh at each call (an optimiser or load_state_dict updates in place)
        self._weights = [
            (f"{mn}.{pn}" if mn else pn, m, pn)
            for mn, m in self.named_modules()
            for pn, _ in m.named_parameters(recurse=False)
        ]

    def forward(
        self,
        tokens: torch.Tensor,
        *,
        hooks: Hooks | None = None,
        all_positions: bool = False,
        answers: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """tokens (n, T) -> logits (n, n_targets, vocab) at the target-predicting positions:
        `mbc.training.forward.forward` over this run's weights (the same forward as a pack's).

        Only those positions reach the loss, so the last block runs queries, W_O and the MLP
        there alone (keys and values everywhere): 14% fewer FLOPs per step at the paper's
        shape, exact in real arithmetic. all_positions=True: logits (n, T-1, vocab).
        hooks: {"blocks.<i>.attn.hook_z" or "...hook_pattern": fn}; fn(z) may return a
        replacement z (n, heads, t_q, d_head) for the queries' positions, fn(pattern) reads
        (n, heads, t_q, t_k). Without hooks nothing is looked up.
        answers: the shared-prefix evaluation (`mbc.training.forward.forward`).
        """
        first = 0 if all_positions else self.task.first_pred_pos
        w = {name: getattr(m, attr) for name, m, attr in self._weights}
        return forward(w, tokens, self.spec, first, hooks=hooks, answers=answers)


class LinearBaseline(nn.Module):
    """E13: two stacked linear maps on one-hot [e_B; e_z] (no nonlinearity), one softmax per
    target.

    It predicts all target tokens at once from the input, so it can represent only
    what a linear function of (B, z) can: E13's test (docs/method.md#e13) of whether depth and
    nonlinearity are needed for the conditional. e_B (`ModelSpec.linear_input`): B's
    characters, or B's identity among the dataset's strings (the buffer `bases`, filled by
    `mbc.training.setup.initial_model` and saved with the weights).
    """

    def __init__(self, spec: ModelSpec, task: TaskSpec):
        super().__init__()
        if task.direction != "bz_to_a":
            raise ValueError("the linear baseline is defined for the bz_to_a task only")
        self.spec, self.task = spec, task
        self.w1 = nn.Linear(spec.linear_n_in(task), spec.linear_hidden)
        self.w2 = nn.Linear(spec.linear_hidden, task.n_targets * VOCAB)
        assert task.n_targets == A_LEN + 1
        if spec.linear_input == "identity":
            self.register_buffer("bases", torch.zeros(task.n_groups, B_LEN, dtype=torch.long))
        # the transformer's rule with the hidden width as the residual width:
        # N(0, 0.8 / sqrt(linear_hidden)) under transformer_lens, biases 0
        init_weights(self, spec.weight_std)

    def forward(self, tokens: torch.Tensor, **_: object) -> torch.Tensor:
        x = linear_features(tokens, self.task, getattr(self, "bases", None))
        return self.w2(self.w1(x.to(self.w1.weight.dtype))).view(-1, self.task.n_targets, VOCAB)


def _b_and_z(tokens: torch.Tensor, task: TaskSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """B's and z's tokens of sequences (..., T): (..., B_LEN), (..., z_length)."""
    return tokens[..., 1 : 1 + B_LEN], tokens[..., 2 + B_LEN : 2 + B_LEN + task.z_length]


def linear_inputs(tokens: torch.Tensor, task: TaskSpec) -> torch.Tensor:
    """The linear baseline's input tokens [B; z] of sequences (..., T): (..., B_LEN + z_length)."""
    return torch.cat(_b_and_z(tokens, task), dim=-1)


def linear_features(
    tokens: torch.Tensor, task: TaskSpec, bases: torch.Tensor | None = None
) -> torch.Tensor:
    """The linear baseline's one-hot input [e_B; e_z] of sequences (..., n, T): (..., n, n_in),
    int64 (`LinearBaseline` and its pack, `mbc.training.packed_models.PackedLinear`).

    bases None: every character of B and z its own one-hot. bases (..., n_groups, B_LEN):
    e_B is one-hot over those strings (B's are distinct; a B that is none of them: zeros).
    A B is found by its number in base VOCAB among the sorted numbers of `bases` (not by
    comparing it with every string: n x n_groups x B_LEN at each evaluation).
    """
    if bases is None:
        return F.one_hot(linear_inputs(tokens, task), VOCAB).flatten(-2)
    b, z = _b_and_z(tokens, task)
    code, codes = _string_code(b), _string_code(bases)
    sorted_codes, order = codes.sort(dim=-1)
    at = torch.searchsorted(sorted_codes, code).clamp(max=codes.shape[-1] - 1)
    group = order.gather(-1, at)
    found = sorted_codes.gather(-1, at) == code
    e_b = F.one_hot(group, codes.shape[-1]) * found.unsqueeze(-1)
    return torch.cat([e_b, F.one_hot(z, VOCAB).flatten(-2)], dim=-1)


def _string_code(chars: torch.Tensor) -> torch.Tensor:
    """(..., L) token ids -> (...,) one int64 per string, distinct for distinct strings."""
    weights = VOCAB ** torch.arange(chars.shape[-1] - 1, -1, -1, device=chars.device)
    return (chars * weights).sum(-1)


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
