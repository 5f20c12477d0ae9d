"""When a run is evaluated and at what learning rate (docs/method.md#training-regimes,
docs/method.md#evaluation-schedule): the learning-rate schedule, the evaluation and snapshot
steps, and the marks whose crossing makes the evaluation dense. All pure functions of the
spec and the step, so a resumed run repeats them exactly; no torch, so that planning (the
banner, the estimate) imports none. The batch order is `mbc.training.data.BatchOrder`."""

from __future__ import annotations

import math

import numpy as np

from mbc.core.spec import EvalSpec, TrainSpec


def schedule(max_steps: int, every: int, n_log: int) -> list[int]:
    """Steps 0, log-spaced points (dense early) and multiples of `every`, up to max_steps."""
    steps = {0, max_steps}
    if n_log > 0:
        steps.update(int(round(s)) for s in np.logspace(0, math.log10(max(max_steps, 1)), n_log))
    if every > 0:
        steps.update(range(every, max_steps + 1, every))
    return sorted(s for s in steps if 0 <= s <= max_steps)


def eval_schedule(spec: EvalSpec, max_steps: int) -> tuple[list[int], list[int]]:
    """(evaluation steps, snapshot steps); snapshots are always evaluation steps too.

    With `on_grid`, a step at or beyond dense_every is rounded up to its grid (at most
    max_steps), and dense_every itself is evaluated: a crossing found between two
    evaluations is then located, by the kept weights between them, to the grid step the
    author's every-50-steps evaluation would report."""

    def grid(steps: list[int]) -> list[int]:
        g = spec.dense_every
        if not (spec.on_grid and g):
            return steps
        out = {s if s < g else min(max_steps, -(-s // g) * g) for s in steps}
        return sorted(out | ({g} if g <= max_steps else set()))

    snaps = grid(schedule(max_steps, spec.checkpoint_every, spec.checkpoint_n_log))
    evals = sorted(set(grid(schedule(max_steps, spec.every, spec.n_log))) | set(snaps))
    return evals, snaps


def learning_rate(train: TrainSpec, step: int) -> float:
    """The learning rate of 1-based optimiser step `step` under `train.schedule`.

    warmup_cosine follows the usual LambdaLR convention (Hugging Face's
    `get_cosine_schedule_with_warmup`), whose factor at scheduler count c = step - 1 is
    c / warmup during warmup, then 0.5 (1 + cos(pi (c - warmup) / (max_steps - warmup))).
    A pure function of the step, so a resumed run takes the same rates.
    """
    if train.schedule == "constant":
        return train.lr
    if train.schedule != "warmup_cosine":
        raise ValueError(f"train.schedule = {train.schedule!r}: expected constant or warmup_cosine")
    c, w = step - 1, train.warmup_steps
    if c < w:
        return train.lr * c / w
    progress = (c - w) / max(1, train.max_steps - w)
    return train.lr * max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


# Thresholds some statistic of `mbc.diagnostics.summary` reads (config.yaml: eval.threshold,
# threshold_sensitivity, diagnostics.plateau/lead, plateau_sensitivity, and the author's
# transition window 0.95 -> 0.05 log K). L_cand and the first-target loss are in units of
# log K, the z-shuffle gaps in nats. tests/test_train.py checks config.yaml against them.
TRANSITION_MARKS = {
    "candidate_loss": (0.05, 0.3, 0.4, 0.5, 0.6, 0.7, 0.9, 0.95),
    "first_target_loss": (0.5, 0.9),
    "delta_z": (0.01, 0.03, 0.1, 0.3),
    "delta_z_first": (0.01, 0.03, 0.1, 0.3),
}


_PER_LOG_K = {"candidate_loss", "first_target_loss"}


def crosses_mark(a: dict | None, b: dict, log_k: float) -> bool:
    """Whether some metric lies on different sides of one of its TRANSITION_MARKS in two
    evaluation rows: then a first-crossing step falls between them."""
    if a is None:
        return True
    for name, marks in TRANSITION_MARKS.items():
        unit = log_k if name in _PER_LOG_K else 1.0
        va, vb = a.get(name), b.get(name)
        if va is None or vb is None or not (math.isfinite(va) and math.isfinite(vb)):
            continue
        if any((va < m * unit) != (vb < m * unit) for m in marks):
            return True
    return False
