"""What one run's evaluations decide (docs/method.md#evaluation-schedule,
docs/method.md#divergence): its crossings (tau, the first-target tau, the logged first-target
tau), its early stop and its divergence. A pure state machine: logged rows in, decisions
out; no files, no clock, no tensors. The record (`mbc.training.record.RunRecord`) feeds it
the rows it logs and writes what it decides, and a resume replays the log into a fresh one
(`replay`), so a resumed run decides exactly as an uninterrupted one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mbc.core.crossing import first_crossing
from mbc.core.divergence import bound, divergence
from mbc.core.journal import logged_divergence, logged_first_target_tau, logged_tau
from mbc.core.spec import RunSpec, grid_mask

# the training-log window's event, `mbc.training.author_log.EVENT` (not imported: that module
# brings torch; tests/test_run_state.py holds the two equal)
WINDOW = "train_window"


@dataclass(frozen=True)
class Crossing:
    """A crossing a row made: its log event and the line the run says."""

    event: dict
    said: str

    @property
    def step(self) -> int:
        return int(self.event["step"])


class RunState:
    """One run's crossings, early stop and divergence. `evaluation` and `window` take the
    rows as they are logged (in step order) and return the crossings they make; `stops` and
    `divergence` decide whether the run ends at a row."""

    def __init__(self, spec: RunSpec):
        self.spec = spec
        self.bound = bound(spec.train)
        self.mark = spec.eval.threshold * spec.task.log_k  # the crossings' bound
        self.tau: int | None = None
        # with train.early_stop_first_target: the evaluated first-target crossing
        self.first_tau: int | None = None
        # with train.early_stop_series train_log or train.early_stop_first_target_log: the
        # logged first-target crossing, and the last window's running-mean L1
        self.first_tau_log: int | None = None
        self.window_loss = math.nan
        self.diverged: int | None = None  # the step at which the run stopped as diverged

    def evaluation(self, row: dict) -> list[Crossing]:
        """A logged evaluation row (not diverged): the crossings it makes (a crossing not
        yet made is this row's, if it crosses; rows come in step order)."""
        made = []
        if self.tau is None and (
            c := self._crossing(row, "candidate_loss", "tau", "tau", "L_cand")
        ):
            self.tau = c.step
            made.append(c)
        if self.spec.train.early_stop_first_target and self.first_tau is None:
            c = self._crossing(
                row, "first_target_loss", "first_target_tau", "first-target tau", "L1"
            )
            if c is not None:
                self.first_tau = c.step
                made.append(c)
        return made

    def _crossing(
        self, row: dict, column: str, event: str, name: str, loss: str
    ) -> Crossing | None:
        """row's crossing of eval.threshold log K in `column` where row is on the evaluation
        grid (the rows a statistic reads): the `event` event, said as `name`."""
        ev = self.spec.eval
        if not grid_mask(ev, row["step"]):
            return None
        step = first_crossing([row["step"]], [row[column]], self.mark)
        if step is None:
            return None
        return Crossing(
            {"event": event, "step": step, event: step},
            f"{self.spec.run_id}: {name} = {step} ({loss} < {ev.threshold:g} log K)",
        )

    def window(self, window: dict) -> Crossing | None:
        """A training-log window (`mbc.training.author_log`): with train.early_stop_series
        train_log its running-mean L1 is the stop's loss and its first crossing of
        eval.threshold log K the stop's clock; with train.early_stop_first_target_log that
        crossing is one the clock waits for (logged as `first_target_tau_log`)."""
        t = self.spec.train
        if t.early_stop_series != "train_log" and not t.early_stop_first_target_log:
            return None
        self.window_loss = mean = float(window["train_first_loss"])
        if self.first_tau_log is not None or not (math.isfinite(mean) and mean < self.mark):
            return None
        self.first_tau_log = step = int(window["step"])
        return Crossing(
            {"event": "first_target_tau_log", "step": step},
            f"{self.spec.run_id}: logged first-target tau = {step} (running-mean L1 on the "
            f"training labels < {self.spec.eval.threshold:g} log K)",
        )

    def replay(self, rows: list[dict]) -> None:
        """The decisions of a run's journal `rows` (a resumed run's up to its resume point,
        a finished run's whole): the logged crossings and divergence, and the windows' state
        (their crossing was logged already)."""
        self.tau, self.first_tau = logged_tau(rows), logged_first_target_tau(rows)
        self.diverged = logged_divergence(rows)
        for w in (r for r in rows if r.get("event") == WINDOW):
            self.window(w)

    def loss_diverges(self, train_loss: float) -> bool:
        """The check between evaluations: the mean training loss since the last row is
        non-finite or above the bound (mbc.core.divergence)."""
        return not math.isfinite(train_loss) or train_loss > self.bound

    def diverge(self, step: int, row: dict) -> str | None:
        """The run stops as diverged at `step`, at its evaluation `row`: the step is kept
        (`diverged`); why `row` shows it (`divergence`; None where only the training loss
        between evaluations did)."""
        self.diverged = step
        return self.divergence(row)

    def divergence(self, row: dict) -> str | None:
        """Why the evaluation `row` (with its mean training loss) shows a diverged run, or
        None (mbc.core.divergence: the one test the run summary reads too)."""
        return divergence(row, self.bound)

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

    def stop_loss(self, row: dict) -> float:
        """What the early stop's loss condition reads: L_cand of the evaluation `row`, or with
        train.early_stop_series train_log the last logged window's running-mean L1."""
        if self.spec.train.early_stop_series == "train_log":
            return self.window_loss
        return row["candidate_loss"]

    def stops(self, step: int, row: dict) -> bool:
        """The early stop at the evaluation `row` of step `step`: its clock known, factor x
        clock steps run, and the loss it reads below early_stop_loss_fraction log K."""
        t, clock = self.spec.train, self.stop_clock()
        if clock is None or t.early_stop_tau_factor <= 0:
            return False
        return step >= t.early_stop_tau_factor * clock and self.stop_loss(row) < (
            t.early_stop_loss_fraction * self.spec.task.log_k
        )
