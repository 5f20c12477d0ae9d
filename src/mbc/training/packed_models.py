"""The stacked models of packed training (`mbc.training.packed.PackedRuns`): R runs' weights
of one shape as one module, each parameter (R, ...) with the run axis first.
`PackedTransformer` runs `mbc.training.forward.forward` over the R weight sets;
`PackedLinear` the linear baseline's two maps as two batched matmuls (E13).

Their forward and loss compute in the pack's arithmetic, `math`
(`mbc.training.step_math`): a run trained alone the ordinary model's (`OrdinaryStep`,
bitwise), a pack job's runs the stacked one (`StackedStep`).
"""

from __future__ import annotations

import torch
from torch import nn

from mbc.core.spec import VOCAB
from mbc.training.forward import forward
from mbc.training.metrics import metrics_from_logprobs, token_logprobs
from mbc.training.model import LinearBaseline, Transformer, linear_features
from mbc.training.step_math import StackedStep, StepMath


def _key(name: str) -> str:
    return name.replace(".", "__")


class _PackedModel(nn.Module):
    """R models of one shape; parameter `a.b` is stored as `a__b` (R, ...).
    Subclasses: `PackedTransformer`, `PackedLinear`."""

    kind: type[nn.Module]
    math: StepMath = StackedStep()  # the pack's arithmetic (`PackedRuns` sets it)
    # whether `evaluate` may run each context's common prefix once for its K candidates
    # (`_eval_logits` takes (R, c, K, T) then)
    shares_prefix = False

    def __init__(self, models: list[nn.Module]):
        super().__init__()
        if not models:
            raise ValueError("need at least one model")
        first = models[0]
        for m in models:
            if not isinstance(m, self.kind):
                raise TypeError(f"{type(self).__name__} packs {self.kind.__name__}s only")
            if _shape(m) != _shape(first):
                raise ValueError("packed runs must share the model's shape and sequence layout")
        states = [dict(m.named_parameters()) for m in models]
        names = [n for n, _ in first.named_parameters()]
        # the parameters of the nn.Linear layers: the ones bf16 training copies (`low`)
        lin = [
            f"{mn}.{pn}"
            for mn, m in first.named_modules()
            if isinstance(m, nn.Linear)
            for pn, _ in m.named_parameters(recurse=False)
        ]
        # buffers (the identity baseline's `bases`): per run, saved with it, never trained
        buffers = [dict(m.named_buffers()) for m in models]
        self._register(
            first.spec,
            first.task,
            {n: torch.stack([s[n].detach() for s in states]) for n in names},
            lin,
            {n: torch.stack([b[n] for b in buffers]) for n, _ in first.named_buffers()},
        )

    def _register(
        self,
        spec,
        task,
        stacked: dict[str, torch.Tensor],
        lin: list[str],
        buffers: dict[str, torch.Tensor],
    ) -> None:
        self.spec, self.task, self.linear_names = spec, task, lin
        self.names, self.buffer_names = list(stacked), list(buffers)
        self.r = stacked[self.names[0]].shape[0]
        for n, t in stacked.items():
            self.register_parameter(_key(n), nn.Parameter(t.clone()))
        for n, t in buffers.items():
            self.register_buffer(_key(n), t.clone())

    def subset(self, rows: torch.Tensor) -> _PackedModel:
        """A pack of these runs only (their rows of every parameter, copied)."""
        new = type(self).__new__(type(self))
        nn.Module.__init__(new)
        new._register(
            self.spec,
            self.task,
            {n: self.p(n).detach()[rows] for n in self.names},
            self.linear_names,
            {n: self.p(n)[rows] for n in self.buffer_names},
        )
        new.math = self.math
        return new.train(self.training)

    def p(self, name: str) -> torch.Tensor:
        return getattr(self, _key(name))

    def state_dict_of(self, r: int) -> dict[str, torch.Tensor]:
        """Run r's weights (and buffers) as an ordinary model's state dict (detached copies)."""
        return {n: self.p(n)[r].detach().clone() for n in self.names + self.buffer_names}

    def weights(self, runs: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Every stacked parameter (and buffer) by its model's name, or its rows of the runs
        `runs`."""
        names = self.names + self.buffer_names
        return {n: self.p(n) if runs is None else self.p(n)[runs] for n in names}

    def _check(self, tokens: torch.Tensor, runs: torch.Tensor | None) -> None:
        r = tokens.shape[0]
        if r != (self.r if runs is None else len(runs)):
            raise ValueError(
                f"expected tokens for {self.r if runs is None else len(runs)} runs, got {r}"
            )

    @torch.no_grad()
    def evaluate(
        self, runs: list[int], batches: list, max_seqs: int = 1 << 15, engine: str = "fast"
    ) -> list[dict]:
        """The in-loop metrics of runs `runs` on their evaluation batches (`EvalBatch`es of
        one shape), in one batched forward per chunk of at most `max_seqs` sequences over
        all runs: with train.engine `fast` and a model that `shares_prefix` each context's K
        candidates share one run of their common prefix (the forward's `answers`, as
        `evaluate_shared_prefix`), otherwise every candidate runs in full (as `evaluate`);
        equal to float32 rounding. For GPUs, where R evaluations one after another are bound
        by kernel launches."""
        idx = torch.as_tensor(runs, device=batches[0].candidates.device)
        n, k, n_t = batches[0].n_contexts, batches[0].task.k, batches[0].task.n_targets
        w = self.weights(idx)

        def logprobs(seqs: torch.Tensor, per_seq: int) -> torch.Tensor:
            """seqs (R, m, ...) -> target log-probs (R, m, ..., n_t), chunked along m."""
            chunk = max(1, max_seqs // (len(runs) * per_seq))
            out = []
            for i in range(0, seqs.shape[1], chunk):
                s = seqs[:, i : i + chunk]
                out.append(token_logprobs(self._eval_logits(w, idx, s), s[..., -n_t:]))
            return torch.cat(out, dim=1)

        cands = torch.stack([b.candidates for b in batches])  # (R, n K, T)
        if engine == "fast" and self.shares_prefix:
            lp = logprobs(cands.view(len(runs), n, k, -1), k)  # (R, n, K, n_t)
        else:
            lp = logprobs(cands, 1).view(len(runs), n, k, -1)
        shuffled = None
        if batches[0].shuffled is not None:
            shuffled = logprobs(torch.stack([b.shuffled for b in batches]), 1)
        return [
            metrics_from_logprobs(lp[j], None if shuffled is None else shuffled[j], b)
            for j, b in enumerate(batches)
        ]

    def losses(
        self, tokens: torch.Tensor, low: dict[str, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-run training loss (R,) (`mbc.training.metrics.training_loss` of each run) and
        per-run first-target loss of the batch (R,), detached, from the same logits (the
        mean cross-entropy of A's first token: the author's training-log series)."""
        logits = self.forward(tokens, low=low).float()
        return self.math.losses(logits, tokens[:, :, -self.task.n_targets :])


class PackedTransformer(_PackedModel):
    """R `mbc.training.model.Transformer`s of one shape."""

    kind = Transformer

    def forward(
        self,
        tokens: torch.Tensor,
        runs: torch.Tensor | None = None,
        low: dict[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """tokens (R, n, T) -> logits (R, n, n_targets, vocab) at the target positions.

        runs: the forward of these runs only (tokens (len(runs), n, T)).
        low: bf16 copies of the linear layers' weights and biases (`linear_names`) to use
        instead of the fp32 parameters: their matmuls then run in bf16 (on a CPU's AMX
        unit), as under `torch.autocast`: the embeddings, LayerNorms and the residual
        stream stay fp32, activations are cast to bf16 where they enter a matmul.
        """
        self._check(tokens, runs)
        w = self.weights(runs) | (low or {})
        return self.math.transformer(w, tokens, self.spec, self.task.first_pred_pos)

    shares_prefix = True

    def _eval_logits(self, w, runs: torch.Tensor, seqs: torch.Tensor) -> torch.Tensor:
        """`evaluate`'s forward of the stacked weights `w`: whole sequences (R, c, T), or
        (R, c, K, T) candidates as their prefix once and the K answers behind it."""
        p = self.task.first_pred_pos
        if seqs.dim() == 3:
            return forward(w, seqs, self.spec, p)
        return forward(
            w, seqs[:, :, 0, : p + 1], self.spec, p, answers=seqs[..., -self.task.n_targets :]
        )


class PackedLinear(_PackedModel):
    """R `mbc.training.model.LinearBaseline`s (E13) of one shape: its two linear maps as
    two `torch.baddbmm` over the R runs' weights, on the same one-hot [B; z] input."""

    kind = LinearBaseline

    def forward(
        self,
        tokens: torch.Tensor,
        runs: torch.Tensor | None = None,
        low: dict[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """tokens (R, n, T) -> logits (R, n, n_targets, vocab), `LinearBaseline.forward` of
        each run. runs, low: as `PackedTransformer.forward`."""
        self._check(tokens, runs)
        w = self.weights(runs) | (low or {})
        r, n, _ = tokens.shape
        x = linear_features(tokens, self.task, w.get("bases"))  # (R, n, n_in)
        return self.math.linear_baseline(w, x).view(r, n, self.task.n_targets, VOCAB)

    def _eval_logits(self, w, runs: torch.Tensor, seqs: torch.Tensor) -> torch.Tensor:
        """`evaluate`'s forward: every candidate in full through `forward` (the linear model
        reads no prefix to share)."""
        return self.forward(seqs, runs)


def packed_model(models: list[nn.Module]) -> _PackedModel:
    """The pack of `models`: `PackedTransformer` or `PackedLinear` by their kind."""
    return (PackedLinear if isinstance(models[0], LinearBaseline) else PackedTransformer)(models)


def _shape(m: nn.Module) -> tuple:
    s, t = m.spec, m.task
    if isinstance(m, LinearBaseline):
        return ("linear", s.linear_input, s.linear_n_in(t), s.linear_hidden, t.seq_len, t.n_targets)
    return (s.n_layers, s.n_heads, s.d_model, s.d_mlp, s.n_positions, t.seq_len, t.n_targets)
