"""What one run records as it trains (docs/method.md#evaluation-schedule): its evaluation
log, the weights kept every dense_every steps and evaluated around crossings, snapshots,
resume points, tau, the early stop and divergence (docs/method.md#divergence).

One `RunRecord` per run, driven by the one trainer (`mbc.training.train.train_pack`: a run
alone is a pack of one), so every run writes the same files at the same steps. The trainer
steps the weights; the record reaches them through a `RunView` (read the weights, evaluate them,
their gradient norm, the optimiser's state). The record composes two parts: what the rows
decide (`mbc.training.run_state.RunState`: crossings, early stop, divergence; pure) and
what is written (`mbc.training.run_writer.RunWriter`: the log under `state/`, resume
points, snapshots, TensorBoard, the lock). The declared outputs, `metrics.csv` and
`checkpoints.csv`, are written from the log by `finalize_run`.
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

from mbc.core.artifacts import write_csv_atomic
from mbc.core.journal import METRIC_COLUMNS, finished, read_journal
from mbc.core.layout import SNAPSHOTS, RunPaths
from mbc.core.spec import RunSpec
from mbc.training import author_log
from mbc.training.run_state import Crossing, RunState
from mbc.training.run_writer import RunWriter, done_event
from mbc.training.schedule import crosses_mark, eval_schedule

Weights = dict[str, torch.Tensor]


class RunView(Protocol):
    """A run's current weights as its trainer holds them (its slice of a pack:
    `mbc.training.pack_view.PackView`). The author's training-log measurements
    (mbc.training.author_log) are part of every view: one that cannot take them (no z to
    derange, no sampled evaluation) returns NaN, which the record logs as not measured; a
    view that subclasses this protocol inherits those NaN defaults."""

    def keep(self) -> Weights:
        """A copy of the current weights (kept at a dense_every step)."""

    def grad_norm(self) -> float:
        """Global L2 norm of the last step's gradient (before clipping, when clipped)."""

    def evaluate(self, weights: list[Weights] | None = None) -> list[dict[str, float]]:
        """The in-loop metrics of the current weights (None) or of each of `weights`,
        on the run's fixed evaluation batch."""

    def resume_state(self) -> dict:
        """{"model": state dict, "optimizer": `torch.optim.AdamW` state dict}."""

    def train_shuffled_first_loss(self, step: int) -> float:
        """The first-target loss of training batch `step` with z deranged, at the current
        weights (the author's logged gap, ours)."""
        return math.nan

    def train_batch_shuffled_first_loss(self, step: int) -> float:
        """The same with z shuffled across the batch (the author's own shuffle)."""
        return math.nan

    def evaluate_sampled(self, step: int) -> float:
        """L_cand of the author's sampled evaluation at `step` (eval.sampled_groups)."""
        return math.nan


class RunRecord:
    """The bookkeeping of one run: `resume`, `start` (evaluate step 0), `after_step` after
    every optimiser step (True once the run has finished), `close`, then `finalize_run`.
    Rows go to its `state` (what they decide) and its `writer` (what is written)."""

    def __init__(
        self,
        spec: RunSpec,
        run_dir: str | os.PathLike,
        say: Callable[[str], None] = print,
        device: torch.device | None = None,
    ):
        self.spec, self.say = spec, say
        self.paths = RunPaths(run_dir)
        self.run_dir = self.paths.dir
        self.state = RunState(spec)
        self.writer = RunWriter(spec, self.paths, say, device)
        evals, snaps = eval_schedule(spec.eval, spec.train.max_steps)
        self.eval_set, self.snap_set = set(evals), set(snaps)
        self.step = self.last_resume = 0
        self.finished = False
        self._losses: list[tuple[int, torch.Tensor]] = []  # (step, loss) since the last row
        self._pending: list[_Kept] = []  # weights kept every dense_every steps since the last eval
        self.last_row: dict | None = None  # the last evaluation's row (progress lines)
        # the author's training-log series (mbc.training.author_log)
        self._windows = author_log.TrainWindows(author_log.window_every(spec))

    @property
    def tau(self) -> int | None:
        return self.state.tau

    @property
    def diverged(self) -> int | None:
        return self.state.diverged

    def stop_clock(self) -> int | None:
        """`RunState.stop_clock` (progress lines)."""
        return self.state.stop_clock()

    def resume(self) -> dict | None:
        """Read the run's state: the resume point to load into the weights (None: start
        from the initial weights, or the run has finished: `finished`). Sets `step`.
        Holds the run's lock until `close` (`mbc.core.run_lock`: one writer per run)."""
        rows = self.writer.open()
        if finished(rows):
            self.finished, self.step = True, rows[-1]["step"]
            self.state.replay(rows)
            return None
        resumed, rows = self.writer.resume_point(rows)
        if resumed is not None:
            self.step = self.last_resume = resumed["step"]
            self.say(f"resuming {self.spec.run_id} from step {self.step}")
        self.state.replay(rows)
        self.last_row = next((r for r in reversed(rows) if "event" not in r), None)
        # finished, its `done` line not written (killed between the two): the budget, or
        # the early stop decided at the resume point's own step
        prev = self.last_row
        stopped = (
            prev is not None and prev["step"] == self.step > 0 and self.state.stops(self.step, prev)
        )
        if self.step >= self.spec.train.max_steps or stopped:
            self.finished = True
            self.writer.rewrite([*rows, done_event(self.step)])
            return None
        self.writer.rewrite(rows)
        self._t0 = time.perf_counter() - (rows[-1].get("wall_s", 0.0) if rows else 0.0)
        self.writer.start(self.step, rows)
        return resumed

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
        step's logits), for the author's training-log series (mbc.training.author_log);
        None: not handed over (those windows log NaN). At a window's last step the record
        asks the view for the window's shuffled losses (`RunView`)."""
        self.step = step
        self._losses.append((step, loss))
        self._train_log_window(step, view, first_loss)
        if self._dense_step(step):
            # the divergence check between evaluations: one host read of the mean loss, at
            # the steps that read the gradient norm anyway (no extra device sync on CUDA)
            if self.state.loss_diverges(_peek_loss(self._losses)):
                return self._diverge(step, view)
            self._pending.append(
                _Kept(step, view.keep(), view.grad_norm(), time.perf_counter() - self._t0)
            )
        if step in self.eval_set:
            row = self._row(view.evaluate()[0], step, math.nan, view.grad_norm())
            if self.state.divergence({**row, "train_loss": _peek_loss(self._losses)}):
                return self._diverge(step, view, row)
            self._log_kept(self.last_row, row, view)
            row["train_loss"] = _mean_loss(self._losses, step)
            self._log(row)
            self.last_row = row
            self._save(step, view, row)
            if self.state.stops(step, row):
                self.say(f"{self.spec.run_id}: early stop at step {step} (tau={self.tau})")
                return self._finish()
        if step >= self.spec.train.max_steps:
            return self._finish()
        return False

    def _train_log_window(self, step: int, view: RunView, first_loss) -> None:
        """The author's training-log series: add the step's first-target loss; at a
        window's last step log the window (with his sampled evaluation where asked)."""
        self._windows.add(first_loss)
        window = self._windows.close(step, view.train_shuffled_first_loss)
        if window is None:
            return
        # the author's own shuffle beside ours, where ours was taken (a running mean exists)
        window["train_first_batch_shuffled_loss"] = (
            view.train_batch_shuffled_first_loss(step)
            if math.isfinite(window["train_first_shuffled_loss"])
            else math.nan
        )
        if self.spec.eval.sampled_groups:  # the author's evaluation (E6)
            window["candidate_loss_sampled"] = view.evaluate_sampled(step)
        if (crossed := self.state.window(window)) is not None:
            self._said(crossed)  # its event before the window's line, as logged before
        self.writer.line(window)

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
            self.writer.snapshot(step, view.keep())
        if (
            step - self.last_resume >= self.spec.eval.resume_every
            or step == self.spec.train.max_steps
        ):
            self.writer.resume(step, view.resume_state(), row["wall_s"])
            self.last_resume = step

    def close(self) -> None:
        self.writer.close()

    def _diverge(self, step: int, view: RunView, row: dict | None = None) -> bool:
        """Stop the run as diverged at `step`: log its evaluation there (evaluated now when
        `row` is None) with the mean training loss since the last row, then the `diverged`
        event and `done`. No snapshot or resume point of the diverged weights is written;
        the weights kept since the last row (past the divergence) are dropped."""
        if row is None:
            row = self._row(view.evaluate()[0], step, math.nan, view.grad_norm())
        row["train_loss"] = _mean_loss(self._losses, step)
        self._pending = []
        self.writer.line(row)  # not _log: a diverged row measures no tau
        reason = self.state.diverge(step, row)
        self.writer.line({"event": "diverged", "step": step, "reason": reason})
        self.say(f"{self.spec.run_id}: diverged at step {step} ({reason}); stopped")
        return self._finish()

    def _finish(self) -> bool:
        self.writer.line(done_event(self.step))
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
        """An evaluation row: logged, then the crossings it makes (their events after it)."""
        self.writer.evaluation(row)
        for crossed in self.state.evaluation(row):
            self._said(crossed)

    def _said(self, crossed: Crossing) -> None:
        """A crossing: its event in the log, its line said."""
        self.writer.line(crossed.event)
        self.say(crossed.said)


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


def finalize_run(spec: RunSpec, run_dir: str | os.PathLike) -> pd.DataFrame:
    """Turn the log into the tidy per-run tables (atomic writes)."""
    paths = RunPaths(run_dir)
    rows = read_journal(paths.log)
    evals = [r for r in rows if "event" not in r]
    metrics = pd.DataFrame(evals, columns=METRIC_COLUMNS).drop_duplicates("step", keep="last")
    metrics.insert(0, "run_id", spec.run_id)
    snaps = pd.DataFrame(
        [r for r in rows if r.get("event") == "snapshot"], columns=["step", "path", "sha256"]
    ).drop_duplicates("step", keep="last")
    snaps["path"] = [str(Path(SNAPSHOTS) / p) for p in snaps["path"]]
    write_csv_atomic(paths.checkpoints, snaps)
    write_csv_atomic(paths.train_log, author_log.table(rows))  # before metrics.csv
    write_csv_atomic(paths.metrics, metrics)
    return metrics
