"""Faster, numerically equivalent training and evaluation paths for `mbc.model.Transformer`.

Nothing here changes what is computed, only how: every function returns what the
corresponding `mbc.metrics` / `mbc.model` call returns, to float32 rounding. They read the
weights of an ordinary `Transformer` (same state dict, same optimiser, same checkpoints),
so `mbc.train` uses them (`train.engine: fast`, the default) without touching the on-disk
formats; `train.engine: plain` keeps `mbc.model` + `mbc.metrics`.

Measured on the shared 2-core CPU (benchmarks/train_step.py, paper model, batch 128,
1 thread, CPU time, medians of interleaved repeats; three runs, +-5% between runs):

* `training_loss` (this module): 1.23-1.33x the eager reference of the benchmark and
  1.07-1.11x `mbc.metrics.training_loss`, at 0.64-0.67 of the step's matmul-only time.
  Two changes, both exact in real arithmetic:
  - last-layer pruning: only the 5 target-predicting positions reach the loss, so the
    last block needs keys/values at all 15 positions but queries, the output projection
    and the MLP only at those 5: 14% fewer FLOPs per step;
  - manual causal attention on CPU, scores laid out keys-first so the softmax runs over
    an inner dimension: at T = 15 one layer's attention takes 3.0-3.3 ms forward +
    backward against 5.6-5.8 ms with the softmax over the last dimension, and the CPU
    kernels of `F.scaled_dot_product_attention` are slower still. On CUDA we keep SDPA.
* `evaluate` (this module) vs `mbc.metrics.evaluate`: the K candidate sequences of a
  context share their first `first_pred_pos + 1` tokens, so the prefix is run once per
  context and only the answer positions once per candidate (a key/value cache): 2-4x
  faster. The answer positions of a context's K candidates form one stream whose queries
  meet the prefix keys in one product, so the prefix keys are never copied per candidate.
  Its share of training is in README.md ("Training speed") for each evaluation cadence.
* `compiled_step` / `compiled_training_loss`: `torch.compile` of the above (gcc on the
  CPU): 1.48-1.52x the eager reference, 0.74-0.77 of the matmul-only time, 1.11-1.21x
  the eager engine; first call 35 s cold, 3-4 s with a warm inductor cache. It fuses
  GELU / LayerNorm / softmax; the matmuls stay.
* AdamW: fused (what `mbc.train.make_optimizer` uses) costs ~2 ms a step, foreach ~6 ms,
  the for-loop default ~8 ms: keep fused.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mbc.metrics import EvalBatch, candidate_loss_from_scores, z_shuffle_gaps
from mbc.model import Transformer


def use_sdpa(device: torch.device) -> bool:
    """SDPA's fused kernels win on CUDA; on CPU at T = 15 the plain formula is faster."""
    return device.type == "cuda"


def _heads(y: torch.Tensor, n_heads: int) -> torch.Tensor:
    n, t, d = y.shape
    return y.view(n, t, n_heads, d // n_heads).transpose(1, 2)


def _merge(z: torch.Tensor) -> torch.Tensor:
    n, h, t, dh = z.shape
    return z.transpose(1, 2).reshape(n, t, h * dh)


def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offset: int, sdpa: bool
) -> torch.Tensor:
    """Causal attention of queries at positions offset.. over keys at 0..; (n, h, t, dh)."""
    tq, tk = q.shape[-2], k.shape[-2]
    if sdpa and offset == 0 and tq == tk:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    keep = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(offset)
    if sdpa:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    # Scores laid out keys-first, (.., tk, tq), so the softmax runs over dim -2: at T = 15
    # torch's CPU softmax over the last dim is ~2.5x slower than over an inner one, and
    # the transposes are free strides in the matmuls (attention 5.6 -> 3.0 ms fwd+bwd).
    att_t = (k @ q.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    att_t = att_t.masked_fill(~keep.T, float("-inf")).softmax(dim=-2)
    return att_t.transpose(-2, -1) @ v


def _mlp(block: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return block.mlp(block.ln2(x))


def target_logits(model: Transformer, tokens: torch.Tensor) -> torch.Tensor:
    """Same as `model(tokens)` for a Transformer: logits (n, n_targets, vocab)."""
    sdpa = use_sdpa(tokens.device)
    p = model.task.first_pred_pos
    x_in = tokens[:, :-1]
    t = x_in.shape[1]
    x = model.tok_emb(x_in) + model.pos_emb.weight[:t]
    h, d = model.spec.n_heads, model.spec.d_model
    last = len(model.blocks) - 1
    for i, block in enumerate(model.blocks):
        a = block.attn
        y = block.ln1(x)
        if i < last:
            q, k, v = (_heads(u, h) for u in a.qkv(y).split(d, dim=2))
            x = x + a.out(_merge(_attend(q, k, v, 0, sdpa)))
            x = x + _mlp(block, x)
        else:  # only the target-predicting positions p.. reach the loss
            w, b = a.qkv.weight, a.qkv.bias
            q = _heads(F.linear(y[:, p:], w[:d], b[:d]), h)
            k, v = (_heads(u, h) for u in F.linear(y, w[d:], b[d:]).split(d, dim=2))
            x = x[:, p:] + a.out(_merge(_attend(q, k, v, p, sdpa)))
            x = x + _mlp(block, x)
    if not model.blocks:
        x = x[:, p:]
    return model.unembed(model.ln_f(x))


def training_loss(model: nn.Module, seqs: torch.Tensor) -> torch.Tensor:
    """Drop-in for `mbc.metrics.training_loss` (falls back to it for non-Transformers)."""
    if not isinstance(model, Transformer):
        from mbc.metrics import training_loss as plain

        return plain(model, seqs)
    n_t = model.task.n_targets
    logits = target_logits(model, seqs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), seqs[:, -n_t:].reshape(-1))


def compiled_training_loss(model: nn.Module, **compile_kw):
    """`torch.compile`d `training_loss` bound to `model` (first call compiles)."""
    return torch.compile(lambda seqs: training_loss(model, seqs), **compile_kw)


def compiled_step(model: nn.Module, opt: torch.optim.Optimizer, **compile_kw):
    """A `step(seqs) -> loss` closure: `train_step` with the compiled loss (compiles once)."""
    loss_fn = compiled_training_loss(model, **compile_kw)
    return lambda seqs: train_step(model, opt, seqs, loss_fn)


def train_step(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    seqs: torch.Tensor,
    loss_fn=None,
    *,
    lr: float | None = None,
    clip_norm: float = 0.0,
):
    """One optimiser step of `mbc.train.train_run` (which calls this); returns the detached loss.

    lr: this step's learning rate (None keeps the optimiser's); clip_norm > 0 clips the
    gradient's global L2 norm before the update (`torch.nn.utils.clip_grad_norm_`); the
    norm before clipping is kept on the model as `model.grad_norm_before_clip` (what
    `train_run` logs as grad_norm: after clipping it would read at most clip_norm).
    """
    loss = (loss_fn or (lambda s: training_loss(model, s)))(seqs)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if clip_norm > 0:
        model.grad_norm_before_clip = torch.nn.utils.clip_grad_norm_(
            model.parameters(), clip_norm
        ).detach()
    if lr is not None:
        for group in opt.param_groups:
            group["lr"] = lr
    opt.step()
    return loss.detach()


# ----------------------------------------------------------------------------- evaluation


def _attend_candidates(
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


def _candidate_logprobs(model: Transformer, ctx: torch.Tensor, answers: torch.Tensor):
    """Teacher-forced log-probs of every candidate answer behind one shared prefix.

    ctx: (n, p + 1) the shared tokens up to the first target-predicting position;
    answers: (n, K, n_t) candidate target tokens. Returns (n, K, n_t) log-probabilities.
    Equivalent to running each full sequence ctx ++ answer through the model. The answer
    positions of a context's K candidates form one stream (n, K * (n_t - 1), d), so every
    linear layer runs on them in one product and the prefix is never repeated.
    """
    n, k, n_t = answers.shape
    p = ctx.shape[1] - 1
    t = n_t - 1
    h, d = model.spec.n_heads, model.spec.d_model
    sdpa = use_sdpa(ctx.device)
    # prefix once per context
    xp = model.tok_emb(ctx) + model.pos_emb.weight[: p + 1]
    # answer inputs (all but the last target token), candidate-major within a context
    xa = (model.tok_emb(answers[:, :, :-1]) + model.pos_emb.weight[p + 1 : p + n_t]).view(
        n, k * t, d
    )
    for block in model.blocks:
        a = block.attn
        qp, kp, vp = (_heads(u, h) for u in a.qkv(block.ln1(xp)).split(d, dim=2))
        qa, ka, va = (_heads(u, h) for u in a.qkv(block.ln1(xa)).split(d, dim=2))
        xp = xp + a.out(_merge(_attend(qp, kp, vp, 0, sdpa)))
        xp = xp + _mlp(block, xp)
        xa = xa + a.out(_merge(_attend_candidates(qa, ka, va, kp, vp, k)))
        xa = xa + _mlp(block, xa)
    # predictions: position p (shared) then the answer positions p+1 .. p+n_t-1
    first = model.unembed(model.ln_f(xp[:, p]))  # (n, vocab)
    rest = model.unembed(model.ln_f(xa)).view(n, k, t, -1)
    logits = torch.cat([first.unsqueeze(1).expand(n, k, -1).unsqueeze(2), rest], dim=2)
    logp = F.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, answers.unsqueeze(-1)).squeeze(-1)


def _target_logprobs(model: Transformer, seqs: torch.Tensor, chunk: int) -> torch.Tensor:
    n_t = model.task.n_targets
    out = []
    for i in range(0, seqs.shape[0], chunk):
        s = seqs[i : i + chunk]
        logp = F.log_softmax(target_logits(model, s).float(), dim=-1)
        out.append(logp.gather(-1, s[:, -n_t:].unsqueeze(-1)).squeeze(-1))
    return torch.cat(out)


@torch.no_grad()
def evaluate(model: nn.Module, batch: EvalBatch, chunk: int = 2048) -> dict[str, float]:
    """Drop-in for `mbc.metrics.evaluate` with a shared-prefix cache for Transformers.

    chunk: candidate sequences per forward pass. Small on purpose: activations above
    glibc's mmap threshold (32 MB at most) are mmapped and page-faulted afresh on every
    call; at mbc.metrics' 8192 sequences that is ~40% of the evaluation's CPU time.
    """
    from mbc.metrics import evaluate as plain

    if not isinstance(model, Transformer):
        return plain(model, batch)
    was_training = model.training
    model.eval()
    try:
        task = batch.task
        k, n_t, p = task.k, task.n_targets, task.first_pred_pos
        seqs = batch.candidates.view(batch.n_contexts, k, -1)
        ctx, answers = seqs[:, 0, : p + 1], seqs[:, :, -n_t:]
        n_ctx = max(1, chunk // k)
        lp = torch.cat(
            [
                _candidate_logprobs(model, ctx[i : i + n_ctx], answers[i : i + n_ctx])
                for i in range(0, batch.n_contexts, n_ctx)
            ]
        )
        scores = lp.double().sum(-1)
        lcand, correct = candidate_loss_from_scores(scores, batch.target)
        true_lp = lp[torch.arange(batch.n_contexts, device=lp.device), batch.target]
        clean = -true_lp.double().mean()
        out = {
            "loss": float(clean),
            "first_target_loss": float(-true_lp[:, 0].double().mean()),
            "candidate_loss": float(lcand.mean()),
            "candidate_accuracy": float(correct.double().mean()),
        }
        shuffled = None if batch.shuffled is None else _target_logprobs(model, batch.shuffled, 512)
        out.update(z_shuffle_gaps(shuffled, true_lp, batch))
        return out
    finally:
        model.train(was_training)
