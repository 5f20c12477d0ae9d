"""In-loop metrics (docs/method.md#metrics), computed on fixed evaluation batches.

Every metric is a `torch.no_grad` function of (model, batch). One batch holds, for each
evaluation context (B_g, z_j), the sequences of all K candidate answers of its group:
the candidate scores give L_cand and accuracy, and the row of the true candidate is the
clean sequence itself, so clean token and first-target losses come for free. The z-shuffle
batch replaces each context's selector by a wrong one of the same group (a derangement
of values: example j gets selector (j + r) mod K, r in 1..K-1, so none keeps its own z).
`evaluate` runs every candidate sequence in full; `evaluate_shared_prefix` (what training
uses, `train.engine: fast`) runs each context's common prefix once for its K candidates.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mbc.core.spec import TaskSpec
from mbc.training.data import Dataset
from mbc.training.model import Transformer


@dataclass(frozen=True)
class EvalBatch:
    """candidates: (n_ctx * K, T) candidate sequences, context-major; target: (n_ctx,)."""

    task: TaskSpec
    examples: torch.Tensor  # (n_ctx,) dataset indices of the contexts
    candidates: torch.Tensor  # (n_ctx * K, T)
    target: torch.Tensor  # (n_ctx,) index of the true candidate
    shuffled: torch.Tensor | None  # (n_ctx, T) clean targets behind a wrong selector

    @property
    def n_contexts(self) -> int:
        return int(self.examples.numel())

    def to(self, device: torch.device | str) -> EvalBatch:
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return EvalBatch(
            self.task, self.examples, move(self.candidates), move(self.target), move(self.shuffled)
        )


def derange_selectors(
    ds: Dataset,
    examples: torch.Tensor,
    rng: np.random.Generator,
    tokens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Clean sequences of `examples` with every z replaced by another selector of its group.
    tokens: the sequences to start from instead of the clean ones (the training sequences,
    whose targets carry the label noise, for the logged training-batch gap)."""
    task = ds.task
    k = task.k
    j = ds.target_index[examples].numpy()
    wrong = (j + rng.integers(1, k, size=j.size)) % k
    sets = ds.selector_set[ds.group[examples]].numpy()
    seqs = (ds.clean_tokens if tokens is None else tokens)[examples].clone()
    pos = list(task.z_positions)
    seqs[:, pos] = ds.selectors[torch.as_tensor(sets), torch.as_tensor(wrong)]
    return seqs


def make_eval_batch(
    ds: Dataset, examples: torch.Tensor, rng: np.random.Generator | None
) -> EvalBatch:
    """Build the candidate and z-shuffle batches for a fixed set of context examples."""
    task = ds.task
    k, n_t = task.k, task.n_targets
    ctx = ds.clean_tokens[examples]  # (n, T)
    seqs = ctx.unsqueeze(1).repeat(1, k, 1)  # (n, K, T)
    seqs[:, :, -n_t:] = ds.candidates[ds.group[examples]]  # every candidate answer
    # rng None: no z-shuffle batch (an evaluation that reads L_cand only)
    shuffled = (
        derange_selectors(ds, examples, rng)
        if task.direction == "bz_to_a" and rng is not None
        else None
    )
    return EvalBatch(
        task, examples, seqs.reshape(-1, task.seq_len), ds.target_index[examples], shuffled
    )


def fixed_contexts(ds: Dataset, n_contexts: int, rng: np.random.Generator) -> torch.Tensor:
    """A fixed random sample of context examples (all of them when D <= n_contexts)."""
    d = ds.tokens.shape[0]
    if n_contexts >= d:
        return torch.arange(d)
    return torch.as_tensor(np.sort(rng.choice(d, size=n_contexts, replace=False)))


def target_logprobs(model: nn.Module, seqs: torch.Tensor, chunk: int = 8192, **kw) -> torch.Tensor:
    """Per-position log-probabilities of the target tokens: (n, n_targets); kw go to the
    model's forward (hooks)."""
    n_t = model.task.n_targets
    out = []
    for i in range(0, seqs.shape[0], chunk):
        s = seqs[i : i + chunk]
        logits = model(s, **kw)
        # half-precision logits are promoted; float32/float64 are kept as they are
        logp = F.log_softmax(logits if logits.dtype.itemsize >= 4 else logits.float(), dim=-1)
        out.append(logp.gather(-1, s[:, -n_t:].unsqueeze(-1)).squeeze(-1))
    return torch.cat(out)


def candidate_loss_from_scores(
    scores: torch.Tensor, target: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """L_cand per context = -(s_j - logsumexp_k s_k) in float64, and correctness of argmax.

    scores: (n_ctx, K) total log-probabilities of each candidate; target: (n_ctx,).
    """
    s = scores.double()
    lcand = -(s.gather(1, target.unsqueeze(1)).squeeze(1) - torch.logsumexp(s, dim=1))
    correct = s.argmax(dim=1) == target
    return lcand, correct


def token_loss(model: nn.Module, seqs: torch.Tensor, **kw) -> torch.Tensor:
    """Mean next-token cross-entropy over the target positions (nats)."""
    return -target_logprobs(model, seqs, **kw).double().mean()


@torch.no_grad()
def evaluate(model: nn.Module, batch: EvalBatch) -> dict[str, float]:
    """All in-loop metrics on one fixed batch, every candidate sequence run in full (the
    reference for `evaluate_shared_prefix`, and the path of the E13 linear baseline)."""
    k = batch.task.k
    with _eval_mode(model):
        lp = target_logprobs(model, batch.candidates).view(batch.n_contexts, k, -1)  # (n, K, n_t)
        shuffled = None if batch.shuffled is None else target_logprobs(model, batch.shuffled)
    return metrics_from_logprobs(lp, shuffled, batch)


@torch.no_grad()
def evaluate_shared_prefix(model: nn.Module, batch: EvalBatch, chunk: int = 2048) -> dict:
    """`evaluate`, with the K candidates of a context sharing one run of their common prefix
    (a key/value cache): 2-4x faster, equal to float32 rounding.

    chunk: candidate sequences per forward pass. Small on purpose: activations above
    glibc's mmap threshold (32 MB at most) are mmapped and page-faulted afresh on every
    call; at `evaluate`'s 8192 sequences that is ~40% of the evaluation's CPU time.
    """
    if not isinstance(model, Transformer):
        return evaluate(model, batch)
    task = batch.task
    k, n_t, p = task.k, task.n_targets, task.first_pred_pos
    seqs = batch.candidates.view(batch.n_contexts, k, -1)
    ctx, answers = seqs[:, 0, : p + 1], seqs[:, :, -n_t:]
    n_ctx = max(1, chunk // k)
    with _eval_mode(model):
        lp = torch.cat(
            [
                _candidate_logprobs(model, ctx[i : i + n_ctx], answers[i : i + n_ctx])
                for i in range(0, batch.n_contexts, n_ctx)
            ]
        )
        shuffled = None if batch.shuffled is None else target_logprobs(model, batch.shuffled, 512)
    return metrics_from_logprobs(lp, shuffled, batch)


@contextmanager
def _eval_mode(model: nn.Module):
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def metrics_from_logprobs(
    lp: torch.Tensor, shuffled: torch.Tensor | None, batch: EvalBatch
) -> dict:
    """The metrics from the candidates' target log-probs lp (n_ctx, K, n_t) and the
    z-shuffled sequences' (n_ctx, n_t) or None."""
    scores = lp.double().sum(-1)
    lcand, correct = candidate_loss_from_scores(scores, batch.target)
    true_lp = lp[torch.arange(batch.n_contexts, device=lp.device), batch.target]  # (n, n_t)
    clean = -true_lp.double().mean()
    out = {
        "loss": float(clean),
        "first_target_loss": float(-true_lp[:, 0].double().mean()),
        "candidate_loss": float(lcand.mean()),
        "candidate_accuracy": float(correct.double().mean()),
    }
    out.update(z_shuffle_gaps(shuffled, true_lp, batch))
    return out


def _candidate_logprobs(model: Transformer, ctx: torch.Tensor, answers: torch.Tensor):
    """Teacher-forced log-probs of every candidate answer behind one shared prefix: the
    model's forward with `answers` (`mbc.training.forward`), equivalent to running each
    full sequence ctx ++ answer through it. ctx: (n, p + 1) the shared tokens up to the
    first target-predicting position; answers: (n, K, n_t). Returns (n, K, n_t)."""
    return token_logprobs(model(ctx, answers=answers), answers)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Log-probabilities (float32) of `tokens` (...) under `logits` (..., vocab)."""
    logp = F.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def z_shuffle_gaps(
    shuffled_lp: torch.Tensor | None, true_lp: torch.Tensor, batch: EvalBatch
) -> dict[str, float]:
    """Delta_z on the whole answer and on its first token (the author's lead statistic:
    L1(z deranged) - L1(clean)), from target log-probs (n_ctx, n_t) of the z-shuffled and
    the clean sequences of the same contexts. NaN where the task has no selector."""
    if batch.shuffled is None:
        return dict.fromkeys(
            ["shuffled_loss", "delta_z", "first_target_shuffled_loss", "delta_z_first"], math.nan
        )
    shuffled, clean = -shuffled_lp.double().mean(), -true_lp.double().mean()
    first_shuffled = -shuffled_lp[:, 0].double().mean()
    return {
        "shuffled_loss": float(shuffled),
        "delta_z": float(shuffled - clean),
        "first_target_shuffled_loss": float(first_shuffled),
        "delta_z_first": float(first_shuffled + true_lp[:, 0].double().mean()),
    }


@torch.no_grad()
def first_target_loss(model: nn.Module, seqs: torch.Tensor) -> float:
    """Mean first-target CE of `seqs` (nats), in eval mode, without gradients."""
    with _eval_mode(model):
        return float(-target_logprobs(model, seqs)[:, 0].double().mean())


def training_loss(model: nn.Module, seqs: torch.Tensor) -> torch.Tensor:
    """The training objective: mean CE over the target positions (A's characters and EOS).
    Float32 logits and the loss in float32 (half-precision logits are promoted)."""
    n_t = model.task.n_targets
    logits = model(seqs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), seqs[:, -n_t:].reshape(-1))


# train.engine -> the in-loop evaluation: how it is computed, not what (equal to float32
# rounding; not in run ids)
ENGINES = {"fast": evaluate_shared_prefix, "plain": evaluate}
