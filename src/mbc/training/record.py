"""What one run records as it trains (docs/method.md#evaluation-schedule): its evaluation
log, the weights kept every dense_every steps and evaluated around crossings, snapshots,
resume points, tau, the early stop and divergence (docs/method.md#divergence).

One `RunRecord` per run, driven by the one trainer (`mbc.training.train.train_pack`: a run
alone is a pack of one), so every run writes the same files at the same steps. The trainer
steps the weights; the record reaches them through a `RunView` (read the weights, evaluate them,
their gradient norm, the optimiser's state).

State that must survive an interruption lives under the run's `state/`
(`mbc.core.layout`), no Snakemake output: its log (one JSON object per line, read by
mbc.core.runlog.read_log; its last line is a `done` event once the run has finished), the
resume point (model + optimiser + step, written atomically at eval steps) and the
snapshots (post-hoc diagnostics). The declared outputs, `metrics.csv` and
`checkpoints.csv`, are written by `finalize_run`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, Protocol

import pandas as pd
import torch

from mbc.core import run_lock
from mbc.core.artifacts import (
    CorruptArtifactError,
    dumps_strict,
    torch_load_checked,
    torch_save_atomic,
    write_csv_atomic,
    write_text_atomic,
)
from mbc.core.crossing import first_crossing
from mbc.core.divergence import bound, divergence
from mbc.core.layout import SNAPSHOTS, RunPaths
from mbc.core.provenance import now, start_event
from mbc.core.runlog import (
    finished,
    keep_damaged,
    last_resume,
    logged_divergence,
    logged_first_target_tau,
    logged_tau,
    read_log,
)
from mbc.core.spec import RunSpec, grid_mask
from mbc.training import tensorboard_log, train_log
from mbc.training.schedule import crosses_mark, eval_schedule

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

Weights = dict[str, torch.Tensor]


class RunView(Protocol):
    """A run's current weights as its trainer holds them (its slice of a pack:
    `mbc.training.pack_view.PackView`).

    Optional: `train_shuffled_first_loss(step) -> float`, the first-target loss of training
    batch `step` with z deranged at the current weights (mbc.training.train_log); a view
    without it leaves the author's logged gap NaN."""

    def keep(self) -> Weights:
        """A copy of the current weights (kept at a dense_every step)."""

    def grad_norm(self) -> float:
        """Global L2 norm of the last step's gradient (before clipping, when clipped)."""

    def evaluate(self, weights: list[Weights] | None = None) -> list[dict[str, float]]:
        """The in-loop metrics of the current weights (None) or of each of `weights`,
        on the run's fixed evaluation batch."""

    def resume_state(self) -> dict:
        """{"model": state dict, "optimizer": `torch.optim.AdamW` state dict}."""


class RunRecord:
    """The bookkeeping of one run: `start` (resume or evaluate step 0), `after_step` after
    every optimiser step (True once the run has finished), then `finalize_run`."""

    def __init__(
        self,
        spec: RunSpec,
        run_dir: str | os.PathLike,
        say: Callable[[str], None] = print,
        device: torch.device | None = None,
    ):
        self.spec, self.say = spec, say
        self.device = device  # named in the log's start events (mbc.measured)
        self.paths = RunPaths(run_dir)
        self.run_dir = self.paths.dir
        evals, snaps = eval_schedule(spec.eval, spec.train.max_steps)
        self.eval_set, self.snap_set = set(evals), set(snaps)
        self.step = self.last_resume = 0
        self.tau: int | None = None
        # with train.early_stop_first_target: the first-target crossing (its own log event)
        self.first_tau: int | None = None
        # with train.early_stop_series train_log or train.early_stop_first_target_log: the
        # logged first-target crossing; with the former also the last window's running-mean
        # L1 (`_window`)
        self.first_tau_log: int | None = None
        self._window_loss = math.nan
        self.diverged: int | None = None  # the step at which the run stopped as diverged
        self.finished = False
        self.bound = bound(spec.train)
        self._fh = None
        self._lock = None  # the run's lock, held from `resume` to `close`
        self._losses: list[tuple[int, torch.Tensor]] = []  # (step, loss) since the last row
        self._pending: list[_Kept] = []  # weights kept every dense_every steps since the last eval
        self.last_row: dict | None = None  # the last evaluation's row (progress lines)
        # the author's training-log series (mbc.training.train_log)
        self._windows = train_log.TrainWindows(train_log.window_every(spec))
        self._tb = None  # TensorBoard scalars (config `tensorboard`), when switched on

    def resume(self) -> dict | None:
        """Read the run's state: the resume point to load into the weights (None: start
        from the initial weights, or the run has finished: `finished`). Sets `step`.
        Holds the run's lock until `close` (`mbc.core.run_lock`: one writer per run)."""
        self._lock = run_lock.hold(self.paths.state)
        self.paths.snapshots.mkdir(parents=True, exist_ok=True)
        if (kept := keep_damaged(self.paths.log)) is not None:  # rewritten below: keep it
            self.say(f"WARNING: {kept}")
        rows = read_log(self.paths.log)
        if finished(rows):
            self.finished, self.step = True, rows[-1]["step"]
            self.tau, self.diverged = logged_tau(rows), logged_divergence(rows)
            return None
        state, rows = _try_resume(self.paths.resume, rows, self.say)
        if state is not None:
            self.step = self.last_resume = state["step"]
            self.say(f"resuming {self.spec.run_id} from step {self.step}")
        self.tau, self.first_tau = logged_tau(rows), logged_first_target_tau(rows)
        for window in (r for r in rows if r.get("event") == train_log.EVENT):
            self._window(window, replay=True)
        self.last_row = next((r for r in reversed(rows) if "event" not in r), None)
        # finished, its `done` line not written (killed between the two): the budget, or
        # the early stop decided at the resume point's own step
        prev = self.last_row
        stopped = (
            prev is not None
            and prev["step"] == self.step > 0
            and _converged(self.spec, self.stop_clock(), self.step, self._stop_loss(prev))
        )
        if self.step >= self.spec.train.max_steps or stopped:
            rows.append({"event": "done", "step": self.step, "time": now()})
            self.finished = True
            write_text_atomic(self.paths.log, "".join(_json_line(r) for r in rows))
            return None
        write_text_atomic(self.paths.log, "".join(_json_line(r) for r in rows))
        self._t0 = time.perf_counter() - (rows[-1].get("wall_s", 0.0) if rows else 0.0)
        self._fh = open(self.paths.log, "a")  # noqa: SIM115 - closed by close()
        self._tb = tensorboard_log.open_run(self.spec, self.run_dir, self.step, rows, self.say)
        # the code and the machine (mbc.measured)
        _append(self._fh, start_event(self.step, self.device))
        return state

    def start(self, view: RunView) -> None:
        """Evaluate the initial weights (a fresh run only)."""
        if self.step == 0 and not self.finished:
            self.last_row = self._row(view.evaluate()[0], 0, math.nan, math.nan)
            self._log(self.last_row)

    def after_step(
        self,
        step: int,
        loss: torch.Tensor,
        view: RunView,
        first_loss: torch.Tensor | None = None,
    ) -> bool:
        """Record optimiser step `step` (its detached loss); True when the run has finished
        (its budget, or the early stop): its trainer stops updating it.

        first_loss: the step's training batch's first-target loss (detached, from the
        step's logits), for the author's training-log series (mbc.training.train_log);
        None: not handed over (those windows log NaN). At a window's last step the record
        asks the view for `train_shuffled_first_loss(step)` when it has one."""
        self.step = step
        self._losses.append((step, loss))
        self._train_log_window(step, view, first_loss)
        if self._dense_step(step):
            # the divergence check between evaluations: one host read of the mean loss, at
            # the steps that read the gradient norm anyway (no extra device sync on CUDA)
            if not math.isfinite(m := _peek_loss(self._losses)) or m > self.bound:
                return self._diverge(step, view)
            self._pending.append(
                _Kept(step, view.keep(), view.grad_norm(), time.perf_counter() - self._t0)
            )
        if step in self.eval_set:
            row = self._row(view.evaluate()[0], step, math.nan, view.grad_norm())
            if divergence({**row, "train_loss": _peek_loss(self._losses)}, self.bound):
                return self._diverge(step, view, row)
            self._log_kept(self.last_row, row, view)
            row["train_loss"] = _mean_loss(self._losses, step)
            self._log(row)
            self.last_row = row
            self._save(step, view, row)
            if _converged(self.spec, self.stop_clock(), step, self._stop_loss(row)):
                self.say(f"{self.spec.run_id}: early stop at step {step} (tau={self.tau})")
                return self._finish()
        if step >= self.spec.train.max_steps:
            return self._finish()
        return False

    def _train_log_window(self, step: int, view: RunView, first_loss) -> None:
        """The author's training-log series: add the step's first-target loss; at a
        window's last step log the window (with his sampled evaluation where asked)."""
        self._windows.add(first_loss)
        window = self._windows.close(step, getattr(view, "train_shuffled_first_loss", None))
        if window is None:
            return
        # the author's own shuffle beside ours, where ours was taken (a running mean exists)
        batch_shuffled = getattr(view, "train_batch_shuffled_first_loss", None)
        window["train_first_batch_shuffled_loss"] = (
            batch_shuffled(step)
            if batch_shuffled is not None and math.isfinite(window["train_first_shuffled_loss"])
            else math.nan
        )
        sampled = getattr(view, "evaluate_sampled", None)
        if self.spec.eval.sampled_groups and sampled is not None:  # the author's evaluation (E6)
            window["candidate_loss_sampled"] = sampled(step)
        self._window(window)
        _append(self._fh, window)

    def _dense_step(self, step: int) -> bool:
        """A step whose weights are kept (every dense_every steps between evaluations)."""
        every = self.spec.eval.dense_every
        return bool(every) and step % every == 0 and step not in self.eval_set

    def _log_kept(self, prev: dict | None, row: dict, view: RunView) -> None:
        """Where the evaluation `row` crosses a transition mark since the one before, `prev`,
        the weights kept since are evaluated and logged (the crossing's dense rows)."""
        if self._pending and crosses_mark(prev, row, self.spec.task.log_k):
            kept_rows = view.evaluate([k.weights for k in self._pending])
            for k, m in zip(self._pending, kept_rows, strict=True):
                kept_row = self._row(m, k.step, math.nan, k.grad_norm)
                kept_row["wall_s"] = k.wall_s
                kept_row["train_loss"] = _mean_loss(self._losses, k.step)
                self._log(kept_row)
        self._pending = []

    def _save(self, step: int, view: RunView, row: dict) -> None:
        """At an evaluation step: the snapshot (at snapshot steps) and the resume point
        (every resume_every steps, and at the budget)."""
        if step in self.snap_set:
            path = self.paths.snapshots / f"step_{step:09d}.pt"
            sha = torch_save_atomic(path, {k: v.cpu() for k, v in view.keep().items()})
            _append(self._fh, {"event": "snapshot", "step": step, "path": path.name, "sha256": sha})
        if (
            step - self.last_resume >= self.spec.eval.resume_every
            or step == self.spec.train.max_steps
        ):
            sha = torch_save_atomic(self.paths.resume, {**view.resume_state(), "step": step})
            _append(
                self._fh, {"event": "resume", "step": step, "sha256": sha, "wall_s": row["wall_s"]}
            )
            self.last_resume = step

    def stop_clock(self) -> int | None:
        """The step the early stop's factor counts from: tau, or the latest of tau and the
        crossings it also waits for (train.early_stop_first_target: the evaluated
        first-target crossing; train.early_stop_first_target_log: the logged one), or with
        train.early_stop_series train_log the logged first-target crossing; None until
        every crossing it waits for has been logged."""
        t = self.spec.train
        if t.early_stop_series == "train_log":
            return self.first_tau_log
        waits = [self.tau]
        if t.early_stop_first_target:
            waits.append(self.first_tau)
        if t.early_stop_first_target_log:
            waits.append(self.first_tau_log)
        return None if None in waits else max(waits)

    def _stop_loss(self, row: dict) -> float:
        """What the early stop's loss condition reads: L_cand of this evaluation, or with
        train.early_stop_series train_log the last logged window's running-mean L1."""
        if self.spec.train.early_stop_series == "train_log":
            return self._window_loss
        return row["candidate_loss"]

    def _window(self, window: dict, replay: bool = False) -> None:
        """A training-log window (`mbc.training.train_log`): with train.early_stop_series
        train_log, its running-mean L1 is the stop's loss and its first crossing of
        eval.threshold log K the stop's clock; with train.early_stop_first_target_log that
        crossing is one the clock waits for (logged as `first_target_tau_log`; `replay`:
        re-read from the log on resume, logged already)."""
        t = self.spec.train
        if t.early_stop_series != "train_log" and not t.early_stop_first_target_log:
            return
        self._window_loss = mean = float(window["train_first_loss"])
        mark = self.spec.eval.threshold * self.spec.task.log_k
        if self.first_tau_log is None and math.isfinite(mean) and mean < mark:
            self.first_tau_log = step = int(window["step"])
            if not replay:
                _append(self._fh, {"event": "first_target_tau_log", "step": step})
                self.say(
                    f"{self.spec.run_id}: logged first-target tau = {step} (running-mean L1 "
                    f"on the training labels < {self.spec.eval.threshold:g} log K)"
                )

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        run_lock.release(self._lock)
        self._lock = None

    def _diverge(self, step: int, view: RunView, row: dict | None = None) -> bool:
        """Stop the run as diverged at `step`: log its evaluation there (evaluated now when
        `row` is None) with the mean training loss since the last row, then the `diverged`
        event and `done`. No snapshot or resume point of the diverged weights is written;
        the weights kept since the last row (past the divergence) are dropped."""
        if row is None:
            row = self._row(view.evaluate()[0], step, math.nan, view.grad_norm())
        row["train_loss"] = _mean_loss(self._losses, step)
        self._pending = []
        _append(self._fh, row)  # not _log: a diverged row measures no tau
        reason = divergence(row, self.bound)
        _append(self._fh, {"event": "diverged", "step": step, "reason": reason})
        self.diverged = step
        self.say(f"{self.spec.run_id}: diverged at step {step} ({reason}); stopped")
        return self._finish()

    def _finish(self) -> bool:
        _append(self._fh, {"event": "done", "step": self.step, "time": now()})
        self.finished = True
        self.close()
        return True

    def _row(self, m: dict, step: int, train_loss: float, grad_norm: float) -> dict:
        b = self.spec.train.batch_size
        return {
            "step": step,
            "examples_seen": step * b,
            "train_loss": train_loss,
            "grad_norm": grad_norm,
            **m,
            "wall_s": time.perf_counter() - self._t0,
        }

    def _log(self, row: dict) -> None:
        _append(self._fh, row)
        if self._tb is not None:
            self._tb.add(row)
        # rows come in step order: a crossing not yet logged is this row's, if it crosses
        if self.tau is None:
            self.tau = self._crossing(row, "candidate_loss", "tau", "tau", "L_cand")
        if self.spec.train.early_stop_first_target and self.first_tau is None:
            self.first_tau = self._crossing(
                row, "first_target_loss", "first_target_tau", "first-target tau", "L1"
            )

    def _crossing(self, row: dict, column: str, event: str, name: str, loss: str) -> int | None:
        """The step of row if it is on the evaluation grid and its `column` is below
        eval.threshold log K (logged as the `event` event, said as `name`), else None."""
        ev = self.spec.eval
        if not grid_mask(ev, row["step"]):
            return None
        step = first_crossing([row["step"]], [row[column]], ev.threshold * self.spec.task.log_k)
        if step is not None:
            _append(self._fh, {"event": event, "step": step, event: step})
            self.say(f"{self.spec.run_id}: {name} = {step} ({loss} < {ev.threshold:g} log K)")
        return step


def _json_line(row: dict) -> str:
    """One strict-JSON line: NaN and infinities (no value yet, or a diverged run's) are
    written as null."""
    return dumps_strict(row) + "\n"


def _append(fh, row: dict) -> None:
    fh.write(_json_line(row))
    fh.flush()
    os.fsync(fh.fileno())


def _try_resume(resume_path: Path, log_rows: list[dict], say: Callable[[str], None]):
    """Return (resume dict or None, log rows up to its step). Corrupt state -> fresh start."""
    if not resume_path.exists():
        return None, []
    last = last_resume(log_rows)
    try:
        if last is None:
            raise CorruptArtifactError(f"{resume_path}: no matching entry in log.jsonl")
        state = torch_load_checked(resume_path, sha256=log_rows[last]["sha256"])
        if state["step"] != log_rows[last]["step"]:
            raise CorruptArtifactError(f"{resume_path}: step does not match log.jsonl")
    except CorruptArtifactError as exc:
        say(f"WARNING: {exc}; starting this run from step 0")
        return None, []
    # The log is ordered: keep everything up to the resume point, drop what came after.
    return state, log_rows[: last + 1]


class _Kept(NamedTuple):
    """Weights kept at a dense_every step, evaluated only if a mark is crossed."""

    step: int
    weights: Weights
    grad_norm: float
    wall_s: float


def _peek_loss(losses: list[tuple[int, torch.Tensor]]) -> float:
    """Mean training loss of the steps not yet reported (kept for the next row)."""
    return float(torch.stack([loss for _, loss in losses]).double().mean()) if losses else math.nan


def _mean_loss(losses: list[tuple[int, torch.Tensor]], upto: int) -> float:
    """Mean training loss of the steps up to `upto` not yet reported; drops them."""
    taken = [loss for s, loss in losses if s <= upto]
    losses[:] = [(s, loss) for s, loss in losses if s > upto]
    return float(torch.stack(taken).double().mean()) if taken else math.nan


def _converged(spec: RunSpec, clock: int | None, step: int, loss: float) -> bool:
    """The early stop: `clock` (`RunRecord.stop_clock`) known, factor x clock steps run,
    and the loss it reads (`RunRecord._stop_loss`) below its condition."""
    t = spec.train
    if clock is None or t.early_stop_tau_factor <= 0:
        return False
    return step >= t.early_stop_tau_factor * clock and loss < (
        t.early_stop_loss_fraction * spec.task.log_k
    )


def finalize_run(spec: RunSpec, run_dir: str | os.PathLike) -> pd.DataFrame:
    """Turn the log into the tidy per-run tables (atomic writes)."""
    paths = RunPaths(run_dir)
    rows = read_log(paths.log)
    evals = [r for r in rows if "event" not in r]
    metrics = pd.DataFrame(evals, columns=METRIC_COLUMNS).drop_duplicates("step", keep="last")
    metrics.insert(0, "run_id", spec.run_id)
    snaps = pd.DataFrame(
        [r for r in rows if r.get("event") == "snapshot"], columns=["step", "path", "sha256"]
    ).drop_duplicates("step", keep="last")
    snaps["path"] = [str(Path(SNAPSHOTS) / p) for p in snaps["path"]]
    write_csv_atomic(paths.checkpoints, snaps)
    write_csv_atomic(paths.train_log, train_log.table(rows))  # before metrics.csv
    write_csv_atomic(paths.metrics, metrics)
    return metrics
