"""How a run's record (`mbc.training.record.RunRecord`) sees run r of a pack (`PackView`):
its weights, their evaluation, its gradient norm and its resume state. Evaluations run on an
ordinary model loaded with the run's weights, so they are the metrics of
`mbc.training.metrics` whatever the pack's width; on CUDA, runs due at one step can be
evaluated in one batched forward instead (`evaluate_together`).
"""

from __future__ import annotations

import math

import torch

from mbc.training.author_log import (
    batch_shuffled_first_loss_fn,
    sampled_batch_fn,
    shuffled_first_loss_fn,
)
from mbc.training.packed import PackedRuns
from mbc.training.record import RunView, Weights


class PackView(RunView):
    """The `mbc.training.record.RunView` of run r of a pack. Evaluations run on `scratch`, an
    ordinary model of the pack's shape shared by its runs, loaded with the run's weights:
    the metrics of `mbc.training.metrics` on the ordinary model, whatever the pack's width."""

    def __init__(
        self, pack: PackedRuns, r: int, scratch: torch.nn.Module, evaluate, batch, dataset
    ):
        self.pack, self.r, self.scratch = pack, r, scratch
        self._evaluate, self.batch = evaluate, batch
        self.batched: tuple[int, dict] | None = None  # (step, metrics) of a batched evaluation
        # the author's logged gap, on the scratch model loaded with this run's weights (None:
        # no z to derange, the loss is NaN)
        self._shuffled = shuffled_first_loss_fn(
            pack.specs[r], dataset, pack.orders[r].indices, scratch
        )
        self._batch_shuffled = batch_shuffled_first_loss_fn(
            pack.specs[r], dataset, pack.orders[r].indices, scratch
        )
        # the author's sampled evaluation (eval.sampled_groups), on the scratch model
        self._sampled = sampled_batch_fn(pack.specs[r], dataset, pack.device)

    def evaluate_sampled(self, step: int) -> float:
        """L_cand of the author's sampled evaluation at `step`, the run's current weights;
        NaN without eval.sampled_groups."""
        if self._sampled is None:
            return math.nan
        self.scratch.load_state_dict(self.pack.weights(self.r))
        return self._evaluate(self.scratch, self._sampled(step))["candidate_loss"]

    def train_shuffled_first_loss(self, step: int) -> float:
        """The first-target loss of training batch `step` with z deranged, at the run's
        current weights (`mbc.training.author_log`); NaN where the task has no selector."""
        if self._shuffled is None:
            return math.nan
        self.scratch.load_state_dict(self.pack.weights(self.r))
        return self._shuffled(step)

    def train_batch_shuffled_first_loss(self, step: int) -> float:
        """The same batch's first-target loss with z shuffled across the batch, the
        author's way (`mbc.training.author_log.shuffle_z_across_batch`); NaN as above."""
        if self._batch_shuffled is None:
            return math.nan
        self.scratch.load_state_dict(self.pack.weights(self.r))
        return self._batch_shuffled(step)

    def keep(self) -> Weights:
        return self.pack.weights(self.r)

    def grad_norm(self) -> float:
        return float(self.pack.grad_norms()[self.r])

    def evaluate(self, weights: list[Weights] | None = None) -> list[dict[str, float]]:
        if weights is None and self.batched and self.batched[0] == self.pack.step_count:
            return [self.batched[1]]
        out = []
        for w in weights if weights is not None else [self.pack.weights(self.r)]:
            self.scratch.load_state_dict(w)
            out.append(self._evaluate(self.scratch, self.batch))
        return out

    def resume_state(self) -> dict:
        model, opt = self.pack.export_run(self.r)
        return {"model": model.state_dict(), "optimizer": opt.state_dict()}


def evaluate_together(pack: PackedRuns, views: list[PackView], due: list[int]) -> None:
    """Evaluate the runs `due` (indices into the pack) of one evaluation-batch shape in one
    batched forward (`PackedTransformer.evaluate`); each view then returns its metrics."""
    groups: dict[tuple, list[int]] = {}
    for j in due:
        b, engine = views[j].batch, pack.specs[views[j].r].train.engine  # not in pack_key
        groups.setdefault((b.task.k, b.n_contexts, b.shuffled is None, engine), []).append(j)
    for (*_, engine), members in groups.items():
        if len(members) < 2:
            continue  # one run: its own evaluation
        got = pack.model.evaluate(members, [views[j].batch for j in members], engine=engine)
        for j, m in zip(members, got, strict=True):
            views[j].batched = (pack.step_count, m)
