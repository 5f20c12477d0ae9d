"""Training of one run (docs/method.md#training-regimes): AdamW, batches without
replacement, a constant or warmup-cosine learning rate. What the run records as it trains
(its log, evaluations, snapshots, resume points, early stop) is
`mbc.training.record.RunRecord`'s, shared with the packed trainer
(`mbc.training.packed_train`).

Data order is a pure function of (seed, step), so a resumed run sees the same batches
as an uninterrupted one and, on CPU, ends bitwise identical.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch

from mbc.core.spec import RunSpec, TrainSpec
from mbc.training import metrics
from mbc.training.data import STREAM_EVAL, STREAM_INIT, BatchOrder, Dataset, stream_seed
from mbc.training.metrics import EvalBatch, fixed_contexts, make_eval_batch
from mbc.training.model import build_model
from mbc.training.record import RunRecord, finalize_run
from mbc.training.schedule import learning_rate
from mbc.training.train_log import sampled_batch_fn, shuffled_first_loss_fn


def pick_device(requested: str = "auto") -> torch.device:
    """Chosen once at the entry point: CUDA when present (or asked for), else CPU."""
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device={requested!r} requested but CUDA is not available")
    return torch.device(requested)


def train_step(
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    seqs: torch.Tensor,
    loss_fn=None,
    *,
    lr: float | None = None,
    clip_norm: float = 0.0,
):
    """One optimiser step of `train_run`; returns the detached loss.

    lr: this step's learning rate (None keeps the optimiser's); clip_norm > 0 clips the
    gradient's global L2 norm before the update (`torch.nn.utils.clip_grad_norm_`); the
    norm before clipping is kept on the model as `model.grad_norm_before_clip` (what
    `train_run` logs as grad_norm: after clipping it would read at most clip_norm).
    A loss_fn that returns (loss, first-target loss) (`step_functions(first_target=True)`)
    leaves the latter on the model as `model.first_target_loss` (None otherwise).
    """
    out = (loss_fn or (lambda s: metrics.training_loss(model, s)))(seqs)
    loss, model.first_target_loss = out if isinstance(out, tuple) else (out, None)
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


# train.engine -> the in-loop evaluation (equal to float32 rounding); one training loss
ENGINES = {"fast": metrics.evaluate_shared_prefix, "plain": metrics.evaluate}


def step_functions(train: TrainSpec, model: torch.nn.Module, first_target: bool = False):
    """(loss(seqs), evaluate(batch)) of `model` as `train_run` computes them.

    first_target: loss(seqs) returns (loss, the batch's first-target loss, detached, from
    the same logits: `mbc.training.metrics.training_losses`), for the training log;
    the loss itself is computed by the same operations either way.
    train.engine picks the evaluation (`fast`: shared-prefix, `plain`: every candidate
    sequence in full; both mbc.training.metrics);
    train.compile wraps the loss in torch.compile (compiled on its first call);
    train.precision bf16 runs it under bf16 autocast.
    """
    if train.engine not in ENGINES:
        raise ValueError(f"train.engine = {train.engine!r}: expected one of {sorted(ENGINES)}")
    evaluate_of = ENGINES[train.engine]

    if train.precision not in ("fp32", "bf16"):
        raise ValueError(f"train.precision = {train.precision!r}: expected fp32 or bf16")

    objective = metrics.training_losses if first_target else metrics.training_loss

    def loss(seqs: torch.Tensor):
        if train.precision == "fp32":
            return objective(model, seqs)
        # bf16 matmuls in the forward (and so in the backward autograd derives from it);
        # the weights, their gradients and the optimiser stay fp32, the loss is fp32
        with torch.autocast(seqs.device.type, dtype=torch.bfloat16):
            return objective(model, seqs)

    def evaluate(batch) -> dict[str, float]:
        return evaluate_of(model, batch)

    return (torch.compile(loss) if train.compile else loss), evaluate


def make_optimizer(model: torch.nn.Module, spec: RunSpec, device: torch.device):
    t = spec.train
    return torch.optim.AdamW(
        model.parameters(),
        lr=t.lr,
        betas=(t.beta1, t.beta2),
        eps=t.eps,
        weight_decay=t.weight_decay,
        # fused kernels exist on CPU and CUDA and are numerically the same algorithm
        fused=True,
    )


class FreshRun(NamedTuple):
    """A run as `train_run` starts it: its data on the device, model at the run's initial
    weights, optimiser, step functions (`step_functions`), batch order and the fixed
    evaluation batch of its in-loop evaluation."""

    tokens: torch.Tensor
    model: torch.nn.Module
    opt: torch.optim.Optimizer
    loss_fn: Callable[[torch.Tensor], torch.Tensor]
    evaluate: Callable[..., dict[str, float]]
    order: BatchOrder
    eval_batch: EvalBatch

    train: TrainSpec

    def step(self, s: int) -> torch.Tensor:
        """The optimiser step on the batch of 1-based step s; returns the detached loss."""
        seqs = self.tokens[self.order.indices(s)]
        return train_step(
            self.model,
            self.opt,
            seqs,
            self.loss_fn,
            lr=learning_rate(self.train, s),
            clip_norm=self.train.clip_norm,
        )


def fresh_run(spec: RunSpec, dataset: Dataset, device: torch.device) -> FreshRun:
    """Build what `train_run` trains (also what `mbc.estimate` times and calibrates)."""
    tokens = dataset.tokens.to(device)
    gen = torch.Generator().manual_seed(stream_seed(spec.seed, STREAM_INIT))
    model = build_model(spec.model, spec.task, gen).to(device).train()
    opt = make_optimizer(model, spec, device)
    loss_fn, evaluate = step_functions(spec.train, model, first_target=True)
    order = BatchOrder(tokens.shape[0], spec.train.batch_size, spec.seed, device)
    batch = eval_batch(spec, dataset, device)
    return FreshRun(tokens, model, opt, loss_fn, evaluate, order, batch, spec.train)


def eval_batch(spec: RunSpec, dataset: Dataset, device: torch.device) -> EvalBatch:
    """The run's fixed evaluation batch (its own seed's contexts and z-shuffles)."""
    rng = np.random.default_rng(stream_seed(spec.seed, STREAM_EVAL))
    contexts = fixed_contexts(dataset, spec.eval.n_contexts, rng)
    return make_eval_batch(dataset, contexts, rng).to(device)


def train_run(
    spec: RunSpec,
    dataset: Dataset,
    run_dir: str | os.PathLike,
    device: torch.device,
    *,
    say: Callable[[str], None] = print,
    stop_after: int | None = None,
    progress_every_s: float = 30.0,
) -> pd.DataFrame:
    """Train one run to its budget (or early stop); write metrics.csv and checkpoints.csv.
    What it records, and when, is `mbc.training.record.RunRecord`'s; a finished run (its
    log ends in `done`) is not trained again.

    stop_after: testing hook, return after that many steps as if interrupted.
    progress_every_s: at the first evaluation this long after the last progress line,
    `say` one (`Progress`); the crossing of tau is always said.
    """
    record = RunRecord(spec, run_dir, say, progress_every_s, device=device)
    run = fresh_run(spec, dataset, device)
    state = record.resume()
    if state is not None:
        run.model.load_state_dict(state["model"])
        run.opt.load_state_dict(state["optimizer"])
    shuffled = shuffled_first_loss_fn(spec, dataset, run.order.indices, run.model)
    sampled = sampled_batch_fn(spec, dataset, device)
    view = ModelView(run.model, run.opt, run.evaluate, run.eval_batch, shuffled, sampled)
    try:
        record.start(view)
        step = record.step
        while not record.finished:
            step += 1
            loss = run.step(step)
            if record.after_step(step, loss, view, run.model.first_target_loss):
                break
            if stop_after is not None and step >= stop_after:
                return pd.DataFrame()
    finally:
        record.close()
    return finalize_run(spec, run_dir)


class ModelView:
    """`mbc.training.record.RunView` of one model and its optimiser."""

    def __init__(self, model, opt, evaluate, batch, shuffled_first=None, sampled=None):
        self.model, self.opt, self._evaluate, self.batch = model, opt, evaluate, batch
        self._shuffled_first = shuffled_first
        self._sampled = sampled  # step -> the author's sampled evaluation batch (train_log)

    def evaluate_sampled(self, step: int) -> float:
        """L_cand of the author's sampled evaluation at `step`, current weights."""
        return (
            math.nan
            if self._sampled is None
            else self._evaluate(self._sampled(step))["candidate_loss"]
        )

    def train_shuffled_first_loss(self, step: int) -> float:
        """First-target loss of training batch `step` with z deranged, current weights
        (NaN where the task has no selector): the author's logged gap (train_log)."""
        return math.nan if self._shuffled_first is None else self._shuffled_first(step)

    def keep(self) -> dict[str, torch.Tensor]:
        return _clone(self.model)

    def grad_norm(self) -> float:
        return _grad_norm(self.model)

    def evaluate(self, weights=None) -> list[dict[str, float]]:
        if weights is None:
            return [self._evaluate(self.batch)]
        # the kept weights in turn; the model's own weights are copied back exactly
        # afterwards (in place, so the optimiser's references stay valid)
        current = _clone(self.model)
        try:
            out = []
            for w in weights:
                self.model.load_state_dict(w)
                out.append(self._evaluate(self.batch))
        finally:
            self.model.load_state_dict(current)
        return out

    def resume_state(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.opt.state_dict()}


def _clone(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _grad_norm(model: torch.nn.Module) -> float:
    """Global L2 norm of the last step's gradient (before clipping, when it was clipped)."""
    before = getattr(model, "grad_norm_before_clip", None)
    if before is not None:
        return float(before)
    norms = [torch.linalg.vector_norm(p.grad) for p in model.parameters() if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.stack(norms))) if norms else math.nan
