"""The author's training-log series (spec section 7, "Lead"; docs/method.md#lead): per window
of `eval.dense_every` steps (the author's 50), the running mean of the first-target loss L1
over the window's training batches, and, at the window's last step, L1 of that same last
training batch with every z deranged (a wrong selector of the same group). His lead reads
these two series: delta_z = shuffled L1 of the last batch minus the window's running mean.

Cheap by construction: each step's L1 comes from the logits the step already computed
(`mbc.training.packed.Step.first_losses`); one extra forward of one batch closes a window.
The record (`mbc.training.record.RunRecord`) logs one `train_window` event per window;
`finalize_run` writes them to `train_log.csv`, read by the run's summary (a run without it,
or whose trainer did not hand L1 over, has the author's lead "not measured").

The shuffled loss is taken at the weights after the window's last optimiser step (the
record sees the weights then); the running mean averages the losses of the window's
forward passes, each before its own step, as a training log does.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from mbc.core.artifacts import write_csv_atomic
from mbc.core.journal import read_journal
from mbc.core.layout import TRAIN_LOG
from mbc.core.spec import RunSpec, TaskSpec
from mbc.training.data import STREAM_WINDOW, Dataset, stream_seed
from mbc.training.metrics import EvalBatch, derange_selectors, first_target_loss, make_eval_batch

EVENT = "train_window"
COLUMNS = [
    "step",
    "n_batches",
    "train_first_loss",
    "train_first_shuffled_loss",
    "delta_z_train_first",
    # his own shuffle: each example gets the z of another example of the batch
    "train_first_batch_shuffled_loss",
    "delta_z_train_first_batch",
    "candidate_loss_sampled",
]
DERIVED = ("delta_z_train_first", "delta_z_train_first_batch")
FILE = TRAIN_LOG  # beside metrics.csv (mbc.core.layout)


def window_every(spec: RunSpec) -> int:
    """The window length: eval.dense_every (the author logged every 50 steps), or eval.every
    when there is no dense grid."""
    return int(spec.eval.dense_every or spec.eval.every)


class TrainWindows:
    """Collects each step's first-target loss; `close` at a window's last step returns the
    event to log (None between windows)."""

    def __init__(self, every: int):
        self.every = every
        self._first: list[torch.Tensor] = []
        self._missing = False
        self._n = 0

    def add(self, first_loss: torch.Tensor | None) -> None:
        self._n += 1
        if first_loss is None:
            self._missing = True
        else:
            self._first.append(first_loss)

    def close(self, step: int, shuffled: Callable[[int], float] | None) -> dict | None:
        """The window's event at its last step (step % every == 0), else None. The
        running mean is NaN when a step of the window handed no loss; the shuffled loss is
        NaN without `shuffled` (the view cannot compute it) or without a running mean."""
        if not self.every or step % self.every:
            return None
        n = self._n
        mean = math.nan
        if self._first and not self._missing:
            mean = float(torch.stack(self._first).double().mean())
        sh = shuffled(step) if shuffled is not None and math.isfinite(mean) else math.nan
        self._first, self._missing, self._n = [], False, 0
        return {
            "event": EVENT,
            "step": step,
            "n_batches": n,
            "train_first_loss": mean,
            "train_first_shuffled_loss": sh,
        }


def _shuffled_first_loss_fn(
    spec: RunSpec,
    indices: Callable[[int], torch.Tensor],
    model,
    shuffle: Callable[[torch.Tensor, np.random.Generator], torch.Tensor],
    stream: tuple[int, ...],
) -> Callable[[int], float] | None:
    """step -> L1 of the training batch of `step` (`indices(step)`, its dataset rows) with its
    z replaced by `shuffle(rows, rng)`, at `model`'s current weights; None where the task has
    no selector. The draw is a pure function of (seed, step, *stream)."""
    if spec.task.direction != "bz_to_a":
        return None
    device = next(model.parameters()).device

    def loss(step: int) -> float:
        rng = np.random.default_rng([stream_seed(spec.seed, STREAM_WINDOW), step, *stream])
        return first_target_loss(model, shuffle(indices(step).cpu(), rng).to(device))

    return loss


def shuffled_first_loss_fn(
    spec: RunSpec, dataset: Dataset, indices: Callable[[int], torch.Tensor], model
) -> Callable[[int], float] | None:
    """step -> L1 of the training batch of `step` with every z deranged (ours), at `model`'s
    current weights; None where the task has no selector to derange."""

    def derange(rows: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        return derange_selectors(dataset, rows, rng, tokens=dataset.tokens)

    return _shuffled_first_loss_fn(spec, indices, model, derange, ())


def shuffle_z_across_batch(
    tokens: torch.Tensor, z_positions: list[int], rng: np.random.Generator
) -> torch.Tensor:
    """The author's z-shuffle (his trainer's `shuffle_z_in_batch`): every sequence takes the z
    of another sequence of the batch, by a permutation whose fixed points are each swapped
    with the next element. Where selectors are shared across groups, about 1/K of the
    sequences get their own z back (another example with the same z); a derangement of
    selectors (`derange_selectors`, ours) never gives one back."""
    n = tokens.shape[0]
    perm = rng.permutation(n)
    for i in range(n):  # as his loop does (for n >= 2 no fixed point is left)
        if perm[i] == i:
            j = (i + 1) % n
            perm[i], perm[j] = perm[j], perm[i]
    out = tokens.clone()
    out[:, z_positions] = tokens[torch.as_tensor(perm)][:, z_positions]
    return out


def batch_shuffled_first_loss_fn(
    spec: RunSpec, dataset: Dataset, indices: Callable[[int], torch.Tensor], model
) -> Callable[[int], float] | None:
    """step -> L1 of the training batch of `step` with z shuffled across the batch, his
    way (`shuffle_z_across_batch`), at `model`'s current weights; None where the task has no
    selector to shuffle. Its draw is apart from ours (its own stream)."""
    positions = list(spec.task.z_positions)

    def across_batch(rows: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        return shuffle_z_across_batch(dataset.tokens[rows], positions, rng)

    return _shuffled_first_loss_fn(spec, indices, model, across_batch, (1,))


def sampled_contexts(task: TaskSpec, n_groups: int, step: int) -> torch.Tensor:
    """The author's evaluation draw at `step` (spec: `random.Random(step)`): `n_groups`
    groups sampled without replacement, one random z (example) of each. A pure function
    of the step, so runs sharing a dataset are scored on the same contexts at a step, as
    his were. Examples are laid out group-major (`mbc.training.data`: example g K + j)."""
    rng = random.Random(step)
    groups = rng.sample(range(task.n_groups), min(n_groups, task.n_groups))
    return torch.tensor([g * task.k + rng.randrange(task.k) for g in groups])


def sampled_batch_fn(
    spec: RunSpec, dataset: Dataset, device: torch.device
) -> Callable[[int], EvalBatch] | None:
    """step -> the candidate batch of the author's sampled evaluation at `step` (no
    z-shuffle: only L_cand is read); None when eval.sampled_groups is 0."""
    n = spec.eval.sampled_groups
    if not n:
        return None

    def batch(step: int) -> EvalBatch:
        # no rng: no z-shuffle batch (make_eval_batch), only L_cand is read
        return make_eval_batch(dataset, sampled_contexts(spec.task, n, step), None).to(device)

    return batch


def table(rows: list[dict]) -> pd.DataFrame:
    """The `train_window` events of a log as train_log.csv (one row per step, the last).
    `candidate_loss_sampled` is NaN where the run had no sampled evaluation."""
    logged = [c for c in COLUMNS if c not in DERIVED]
    ev = pd.DataFrame([r for r in rows if r.get("event") == EVENT], columns=logged)
    ev = ev.drop_duplicates("step", keep="last").sort_values("step")
    ev = ev.astype(
        {
            "train_first_loss": float,
            "train_first_shuffled_loss": float,
            "train_first_batch_shuffled_loss": float,
            "candidate_loss_sampled": float,
        }
    )
    ev["delta_z_train_first"] = ev["train_first_shuffled_loss"] - ev["train_first_loss"]
    ev["delta_z_train_first_batch"] = ev["train_first_batch_shuffled_loss"] - ev["train_first_loss"]
    return ev.reset_index(drop=True)[COLUMNS]


def write_from_log(log: Path, out: Path) -> bool:
    """train_log.csv written again from the run's log, as `finalize_run` wrote it (a log
    from before its windows were logged has none: nothing written, False)."""
    rows = read_journal(log)
    if not any(r.get("event") == EVENT for r in rows):
        return False
    write_csv_atomic(out, table(rows))
    return True
