"""A training job's progress lines (`mbc.training.train.train_pack`), at most one every
`every_s` seconds: a job of one run says the run's own line (`run_line`), a pack says the
pack's (`pack_line`). The crossing of tau and the early stop are said by the run's record
(`mbc.training.record.RunRecord`) as they happen.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from mbc.core.spec import RunSpec
from mbc.core.units import duration


class Progress:
    """Counts the job's steps and says a line when `every_s` seconds have passed since the
    last; `records` are the job's runs (`RunRecord`s: their step, last evaluation row,
    tau and early-stop clock)."""

    def __init__(self, records: list, say: Callable[[str], None], every_s: float):
        self.records, self.say, self.every_s = records, say, every_s
        self.t0 = self.last = time.perf_counter()
        self.n = 0

    def report(self, step: int, width: int) -> None:
        """After the job's optimiser step `step` of a pack of `width` runs."""
        self.n += 1
        now = time.perf_counter()
        if now - self.last < self.every_s:
            return
        self.last = now
        rate = self.n / max(now - self.t0, 1e-9)
        if len(self.records) == 1:
            rec = self.records[0]
            if rec.last_row is not None:
                self.say(run_line(rec.spec, step, rec.last_row, rec.tau, rec.stop_clock(), rate))
            return
        active = sum(not r.finished for r in self.records)
        crossed = sum(r.tau is not None for r in self.records)
        self.say(pack_line(step, width, active, len(self.records), crossed, rate, now - self.t0))


def run_line(
    spec: RunSpec, step: int, row: dict, tau: int | None, clock: int | None, rate: float
) -> str:
    """step / budget, L_cand / log K and delta_z of the last evaluation `row`, tau,
    steps/s and the time left: to the budget, or once tau is known to the early stop's
    step (factor x clock, `RunRecord.stop_clock`), which stops the run only if L_cand is
    then below its loss condition; past that step the run goes on until it is, so the
    time left is to the budget again, said as an upper bound."""
    t, log_k = spec.train, spec.task.log_k
    end, note = t.max_steps, ""
    if clock is not None and t.early_stop_tau_factor > 0:
        stop = math.ceil(t.early_stop_tau_factor * clock)
        until = f"L_cand < {t.early_stop_loss_fraction:g} log K"
        if step < stop < end:
            end, note = stop, f" (early stop at step {stop:,} if {until})"
        elif stop <= step:
            note = f" at most (stops early once {until})"
    dz = row.get("delta_z")
    dz_text = "-" if dz is None or not math.isfinite(dz) else f"{dz:.3f}"
    return (
        f"{spec.run_id}: step {step:,}/{t.max_steps:,}  L_cand/logK "
        f"{row['candidate_loss'] / log_k:.3f}  delta_z {dz_text}  tau "
        f"{'-' if tau is None else tau}  {rate:.1f} steps/s"
        f"  ETA {duration((end - step) / max(rate, 1e-9))}{note}"
    )


def pack_line(
    step: int, width: int, active: int, runs: int, crossed: int, rate: float, elapsed_s: float
) -> str:
    """The pack's step, its width now, runs still training and past tau, pack steps/s."""
    return (
        f"pack step {step:,}: {width} run(s) in this pack, {active} of {runs} still "
        f"training, {crossed} past tau; {rate:.1f} pack steps/s ({duration(elapsed_s)} so far)"
    )
