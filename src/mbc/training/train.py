"""Training of one run (docs/method.md#training-regimes): AdamW, batches without
replacement, a constant or warmup-cosine learning rate, evaluation on a coarse grid made
dense around crossings (docs/method.md#evaluation-schedule).

State that must survive an interruption lives under `<run_dir>/state/` and is not a
Snakemake output (Snakemake deletes the outputs of a failed job; we must not lose our
checkpoints with them):
  state/log.jsonl           append-only evaluation log, one JSON object per line
                            (read by mbc.core.runlog.read_log)
  state/resume.pt           model + optimiser + step, written atomically at eval steps
  state/snapshots/*.pt      model weights at the snapshot schedule (post-hoc diagnostics)
The declared outputs, `metrics.csv` and `checkpoints.csv`, are written once at the end.
Data order is a pure function of (seed, step), so a resumed run sees the same batches
as an uninterrupted one and, on CPU, ends bitwise identical.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch

from mbc.core.artifacts import (
    CorruptArtifactError,
    torch_load_checked,
    torch_save_atomic,
    write_csv_atomic,
    write_text_atomic,
)
from mbc.core.crossing import first_crossing
from mbc.core.runlog import logged_tau, read_log
from mbc.core.spec import RunSpec, TrainSpec, grid_mask
from mbc.training import metrics
from mbc.training.data import STREAM_EVAL, STREAM_INIT, Dataset, stream_seed
from mbc.training.metrics import EvalBatch, fixed_contexts, make_eval_batch
from mbc.training.model import build_model
from mbc.training.schedule import BatchOrder, crosses_mark, eval_schedule, learning_rate

METRIC_COLUMNS = [
    "step",
    "examples_seen",
    "train_loss",
    "loss",
    "first_target_loss",
    "candidate_loss",
    "candidate_accuracy",
    "shuffled_loss",
    "delta_z",
    "first_target_shuffled_loss",
    "delta_z_first",
    "grad_norm",
    "wall_s",
]


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
    """
    loss = (loss_fn or (lambda s: metrics.training_loss(model, s)))(seqs)
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


def step_functions(train: TrainSpec, model: torch.nn.Module):
    """(loss(seqs), evaluate(batch)) of `model` as `train_run` computes them.

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

    def loss(seqs: torch.Tensor) -> torch.Tensor:
        if train.precision == "fp32":
            return metrics.training_loss(model, seqs)
        # bf16 matmuls in the forward (and so in the backward autograd derives from it);
        # the weights, their gradients and the optimiser stay fp32, the loss is fp32
        with torch.autocast(seqs.device.type, dtype=torch.bfloat16):
            return metrics.training_loss(model, seqs)

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
    loss_fn, evaluate = step_functions(spec.train, model)
    order = BatchOrder(tokens.shape[0], spec.train.batch_size, spec.seed, device)
    rng = np.random.default_rng(stream_seed(spec.seed, STREAM_EVAL))
    contexts = fixed_contexts(dataset, spec.eval.n_contexts, rng)
    eval_batch = make_eval_batch(dataset, contexts, rng).to(device)
    return FreshRun(tokens, model, opt, loss_fn, evaluate, order, eval_batch, spec.train)


def _json_line(row: dict) -> str:
    """One strict-JSON line: NaN and infinities (no value yet) are written as null."""
    clean = {
        k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()
    }
    return json.dumps(clean, allow_nan=False) + "\n"


def _append(fh, row: dict) -> None:
    fh.write(_json_line(row))
    fh.flush()
    os.fsync(fh.fileno())


def _try_resume(state_dir: Path, log_rows: list[dict], say: Callable[[str], None]):
    """Return (resume dict or None, log rows up to its step). Corrupt state -> fresh start."""
    resume_path = state_dir / "resume.pt"
    if not resume_path.exists():
        return None, []
    marks = [r for r in log_rows if r.get("event") == "resume"]
    try:
        if not marks:
            raise CorruptArtifactError(f"{resume_path}: no matching entry in log.jsonl")
        state = torch_load_checked(resume_path, sha256=marks[-1]["sha256"])
        if state["step"] != marks[-1]["step"]:
            raise CorruptArtifactError(f"{resume_path}: step does not match log.jsonl")
    except CorruptArtifactError as exc:
        say(f"WARNING: {exc}; starting this run from step 0")
        return None, []
    # The log is ordered: keep everything up to the resume point, drop what came after.
    last = max(i for i, r in enumerate(log_rows) if r.get("event") == "resume")
    kept = log_rows[: last + 1]
    return state, kept


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

    stop_after: testing hook, return after that many steps as if interrupted.
    progress_every_s: at the first evaluation this long after the last progress line,
    `say` one (`Progress`); the crossing of tau is always said.
    """
    run_dir = Path(run_dir)
    state_dir = run_dir / "state"
    snap_dir = state_dir / "snapshots"
    snap_dir.mkdir(parents=True, exist_ok=True)
    log_path = state_dir / "log.jsonl"

    t, ev, task = spec.train, spec.eval, spec.task
    run = fresh_run(spec, dataset, device)
    model, opt, evaluate, batch = run.model, run.opt, run.evaluate, run.eval_batch
    evals, snaps = eval_schedule(ev, t.max_steps)
    eval_set, snap_set = set(evals), set(snaps)

    state, rows = _try_resume(state_dir, read_log(log_path), say)
    step, last_resume = 0, 0
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = last_resume = state["step"]
        say(f"resuming {spec.run_id} from step {step}")
    write_text_atomic(log_path, "".join(_json_line(r) for r in rows))
    tau = logged_tau(rows)

    progress = Progress(spec, step, say, progress_every_s)
    losses: list[tuple[int, torch.Tensor]] = []  # (step, loss) since the last logged row
    pending: list[_Kept] = []  # weights kept every dense_every steps since the last eval
    prev_row = next((r for r in reversed(rows) if "event" not in r), None)
    t0 = time.perf_counter() - (rows[-1].get("wall_s", 0.0) if rows else 0.0)
    with open(log_path, "a") as fh:

        def log(row: dict) -> None:
            nonlocal tau
            _append(fh, row)
            if tau is None and grid_mask(ev, row["step"]):
                # rows come in step order and no earlier grid row crossed (tau is None)
                bound = ev.threshold * task.log_k
                tau = first_crossing([row["step"]], [row["candidate_loss"]], bound)
                if tau is not None:
                    _append(fh, {"event": "tau", "step": tau, "tau": tau})
                    say(f"{spec.run_id}: tau = {tau} (L_cand < {ev.threshold:g} log K)")

        if step == 0:
            prev_row = _eval_row(evaluate, batch, 0, t.batch_size, math.nan, math.nan, t0)
            log(prev_row)
        while step < t.max_steps:
            step += 1
            losses.append((step, run.step(step)))
            if ev.dense_every and step % ev.dense_every == 0 and step not in eval_set:
                pending.append(
                    _Kept(step, _clone(model), _grad_norm(model), time.perf_counter() - t0)
                )
            if step in eval_set:
                row = _eval_row(
                    evaluate, batch, step, t.batch_size, math.nan, _grad_norm(model), t0
                )
                if pending and crosses_mark(prev_row, row, task.log_k):
                    for kept_row in _evaluate_kept(model, pending, evaluate, batch, t.batch_size):
                        kept_row["train_loss"] = _mean_loss(losses, kept_row["step"])
                        log(kept_row)
                pending = []
                row["train_loss"] = _mean_loss(losses, step)
                log(row)
                prev_row = row
                progress.report(step, row, tau)
                if step in snap_set:
                    path = snap_dir / f"step_{step:09d}.pt"
                    sha = torch_save_atomic(
                        path, {k: v.cpu() for k, v in model.state_dict().items()}
                    )
                    _append(
                        fh, {"event": "snapshot", "step": step, "path": path.name, "sha256": sha}
                    )
                if step - last_resume >= ev.resume_every or step == t.max_steps:
                    sha = torch_save_atomic(
                        state_dir / "resume.pt",
                        {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step},
                    )
                    _append(
                        fh,
                        {"event": "resume", "step": step, "sha256": sha, "wall_s": row["wall_s"]},
                    )
                    last_resume = step
                if _converged(spec, tau, step, row):
                    say(f"{spec.run_id}: early stop at step {step} (tau={tau})")
                    break
            if stop_after is not None and step >= stop_after:
                return pd.DataFrame()
    return finalize_run(spec, run_dir)


class Progress:
    """One line at most every `every_s` seconds of a running job: step / budget,
    L_cand / log K, delta_z, tau, steps/s and the time left (to the early stop once tau
    is known, else to the budget)."""

    def __init__(self, spec: RunSpec, step: int, say: Callable[[str], None], every_s: float):
        self.spec, self.say, self.every_s = spec, say, every_s
        self.t0 = self.last = time.perf_counter()
        self.step0 = step

    def report(self, step: int, row: dict, tau: int | None) -> None:
        now = time.perf_counter()
        if now - self.last < self.every_s or step == self.step0:
            return
        self.last = now
        t, log_k = self.spec.train, self.spec.task.log_k
        rate = (step - self.step0) / max(now - self.t0, 1e-9)
        end = t.max_steps
        if tau is not None and t.early_stop_tau_factor > 0:
            end = min(end, max(step, math.ceil(t.early_stop_tau_factor * tau)))
        dz = row.get("delta_z")
        dz_text = "-" if dz is None or not math.isfinite(dz) else f"{dz:.3f}"
        self.say(
            f"step {step:,}/{t.max_steps:,}  L_cand/logK {row['candidate_loss'] / log_k:.3f}"
            f"  delta_z {dz_text}  tau {'-' if tau is None else tau}  {rate:.1f} steps/s"
            f"  ETA {_duration((end - step) / max(rate, 1e-9))}"
            + ("" if end == t.max_steps else " (early stop)")
        )


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class _Kept(NamedTuple):
    """Weights kept at a dense_every step, evaluated only if a mark is crossed."""

    step: int
    weights: dict[str, torch.Tensor]
    grad_norm: float
    wall_s: float


def _clone(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _grad_norm(model: torch.nn.Module) -> float:
    """Global L2 norm of the last step's gradient (before clipping, when it was clipped)."""
    before = getattr(model, "grad_norm_before_clip", None)
    if before is not None:
        return float(before)
    norms = [torch.linalg.vector_norm(p.grad) for p in model.parameters() if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.stack(norms))) if norms else math.nan


def _mean_loss(losses: list[tuple[int, torch.Tensor]], upto: int) -> float:
    """Mean training loss of the steps up to `upto` not yet reported; drops them."""
    taken = [loss for s, loss in losses if s <= upto]
    losses[:] = [(s, loss) for s, loss in losses if s > upto]
    return float(torch.stack(taken).double().mean()) if taken else math.nan


def _evaluate_kept(model, kept: list[_Kept], evaluate, batch, batch_size: int) -> list[dict]:
    """Evaluation rows of kept weights, in step order; the model's own weights are copied
    back exactly afterwards (in place, so the optimiser's references stay valid)."""
    current = _clone(model)
    rows = []
    try:
        for k in kept:
            model.load_state_dict(k.weights)
            row = _eval_row(evaluate, batch, k.step, batch_size, math.nan, k.grad_norm, 0.0)
            row["wall_s"] = k.wall_s
            rows.append(row)
    finally:
        model.load_state_dict(current)
    return rows


def _converged(spec: RunSpec, tau: int | None, step: int, row: dict) -> bool:
    t = spec.train
    if tau is None or t.early_stop_tau_factor <= 0:
        return False
    return step >= t.early_stop_tau_factor * tau and row["candidate_loss"] < (
        t.early_stop_loss_fraction * spec.task.log_k
    )


def _eval_row(evaluate, batch, step, batch_size, train_loss, grad_norm, t0) -> dict:
    m = evaluate(batch)
    return {
        "step": step,
        "examples_seen": step * batch_size,
        "train_loss": train_loss,
        "grad_norm": grad_norm,
        **m,
        "wall_s": time.perf_counter() - t0,
    }


def finalize_run(spec: RunSpec, run_dir: str | os.PathLike) -> pd.DataFrame:
    """Turn the log into the tidy per-run tables (atomic writes)."""
    run_dir = Path(run_dir)
    rows = read_log(run_dir / "state" / "log.jsonl")
    evals = [r for r in rows if "event" not in r]
    metrics = pd.DataFrame(evals, columns=METRIC_COLUMNS).drop_duplicates("step", keep="last")
    metrics.insert(0, "run_id", spec.run_id)
    snaps = pd.DataFrame(
        [r for r in rows if r.get("event") == "snapshot"], columns=["step", "path", "sha256"]
    ).drop_duplicates("step", keep="last")
    snaps["path"] = [str(Path("state") / "snapshots" / p) for p in snaps["path"]]
    write_csv_atomic(run_dir / "checkpoints.csv", snaps)
    write_csv_atomic(run_dir / "metrics.csv", metrics)
    return metrics
