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
from mbc.training.model import Transformer, attend, use_sdpa


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


def make_eval_batch(ds: Dataset, examples: torch.Tensor, rng: np.random.Generator) -> EvalBatch:
    """Build the candidate and z-shuffle batches for a fixed set of context examples."""
    task = ds.task
    k, n_t = task.k, task.n_targets
    ctx = ds.clean_tokens[examples]  # (n, T)
    seqs = ctx.unsqueeze(1).repeat(1, k, 1)  # (n, K, T)
    seqs[:, :, -n_t:] = ds.candidates[ds.group[examples]]  # every candidate answer
    shuffled = derange_selectors(ds, examples, rng) if task.direction == "bz_to_a" else None
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


def _attend_candidates(
    q: torch.Tensor, k_own: torch.Tensor, v_own: torch.Tensor, k_pre: torch.Tensor,
    v_pre: torch.Tensor, k: int,
) -> torch.Tensor:  # fmt: skip
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


def _candidate_logprobs(model: Transformer, ctx: torch.Tensor, answers: torch.Tensor):
    """Teacher-forced log-probs of every candidate answer behind one shared prefix, with the
    model's own blocks (projections, W_O, MLP) and `attend` for the prefix.

    ctx: (n, p + 1) the shared tokens up to the first target-predicting position;
    answers: (n, K, n_t) candidate target tokens. Returns (n, K, n_t) log-probabilities.
    Equivalent to running each full sequence ctx ++ answer through the model. The answer
    positions of a context's K candidates form one stream (n, K * (n_t - 1), d), so every
    linear layer runs on them in one product and the prefix is never repeated.
    """
    n, k, n_t = answers.shape
    p = ctx.shape[1] - 1
    t = n_t - 1
    d = model.spec.d_model
    sdpa = use_sdpa(ctx.device)
    # prefix once per context
    xp = model.tok_emb(ctx) + model.pos_emb.weight[: p + 1]
    # answer inputs (all but the last target token), candidate-major within a context
    xa = (model.tok_emb(answers[:, :, :-1]) + model.pos_emb.weight[p + 1 : p + n_t]).view(
        n, k * t, d
    )
    for block in model.blocks:
        a = block.attn
        qp, kp, vp = a.project(block.ln1(xp))
        qa, ka, va = a.project(block.ln1(xa))
        xp = xp + a.output(attend(qp, kp, vp, 0, sdpa)[0])
        xp = xp + block.feed_forward(xp)
        xa = xa + a.output(_attend_candidates(qa, ka, va, kp, vp, k))
        xa = xa + block.feed_forward(xa)
    # predictions: position p (shared) then the answer positions p+1 .. p+n_t-1
    first = model.unembed(model.ln_f(xp[:, p]))  # (n, vocab)
    rest = model.unembed(model.ln_f(xa)).view(n, k, t, -1)
    logits = torch.cat([first.unsqueeze(1).expand(n, k, -1).unsqueeze(2), rest], dim=2)
    logp = F.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, answers.unsqueeze(-1)).squeeze(-1)


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


def training_losses(model: nn.Module, seqs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(`training_loss`, computed by the same operations, and the batch's first-target loss:
    the mean CE of A's first token over the vocabulary, detached, from the same logits).
    The second costs one cross-entropy over (batch, vocab); it is what the training log's
    running mean averages (mbc.training.train_log)."""
    n_t = model.task.n_targets
    logits = model(seqs)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), seqs[:, -n_t:].reshape(-1))
    first = F.cross_entropy(logits[:, 0].detach().float(), seqs[:, -n_t])
    return loss, first


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
