"""Training (docs/method.md#training-regimes): AdamW, batches without replacement, a
constant or warmup-cosine learning rate. One trainer, `train_pack`, trains R >= 1 runs of
one shape together (`mbc.training.packed.PackedRuns`: the one optimiser step); a run alone,
`train_run`, is a pack of one with the ordinary model's arithmetic (`ordinary`). Each run
records exactly the same files in its own directory (`mbc.training.record.RunRecord`): its
log, evaluations, snapshots, resume points, tau, early stop and finally metrics.csv and
checkpoints.csv.

Data order is a pure function of (seed, step), so a resumed run sees the same batches
as an uninterrupted one and, on CPU, ends bitwise identical.

A pack's runs share their optimiser step count. Runs that resume from different steps
(one resumed at 5000, one started afresh) train in turn: the ones furthest behind first,
as a smaller pack, until they catch up, then together. A run that finishes (its budget or
its early stop) leaves the pack, which continues without it: it stops updating, and the
others' arithmetic is unchanged (each run's gradient and AdamW update are its own).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

import pandas as pd
import torch

from mbc.core.journal import finished, read_journal
from mbc.core.layout import RunPaths
from mbc.core.spec import RunSpec
from mbc.training.data import Dataset
from mbc.training.metrics import ENGINES
from mbc.training.model import build_model
from mbc.training.pack_view import PackView, evaluate_together
from mbc.training.packed import PackedRuns
from mbc.training.progress import Progress
from mbc.training.record import RunRecord, finalize_run
from mbc.training.setup import check_train, eval_batch


def train_run(
    spec: RunSpec,
    dataset: Dataset,
    run_dir: str | os.PathLike,
    device: torch.device | str,
    *,
    say: Callable[[str], None] = print,
    stop_after: int | None = None,
    progress_every_s: float = 30.0,
) -> pd.DataFrame:
    """Train one run to its budget (or early stop): a pack of one (`train_pack`) with the
    ordinary model's arithmetic (bitwise the ordinary model's training). Returns
    its metrics.csv table, written from its log (a run finished before is not trained
    again, its tables are written afresh); empty when `stop_after` interrupted it.
    stop_after, progress_every_s: as `train_pack`'s."""
    train_pack(
        [spec],
        [dataset],
        [run_dir],
        device,
        say=say,
        stop_after=stop_after,
        progress_every_s=progress_every_s,
        finalize=False,
        ordinary=True,
    )
    if not finished(read_journal(RunPaths(run_dir).log)):
        return pd.DataFrame()  # interrupted (stop_after)
    return finalize_run(spec, run_dir)


def train_pack(
    specs: list[RunSpec],
    datasets: list[Dataset],
    run_dirs: list[str | os.PathLike],
    device: torch.device | str,
    *,
    say: Callable[[str], None] = print,
    stop_after: int | None = None,
    deadline: float | None = None,
    batched_eval: bool | None = None,
    progress_every_s: float = 30.0,
    finalize: bool = True,
    ordinary: bool = False,
) -> list[bool]:
    """Train the runs together; each trained here writes its metrics.csv and checkpoints.csv
    once all have finished (`finalize`: False leaves that to the caller). Returns, per run,
    whether it was trained here (False: it had finished before).

    stop_after: testing hook, return after this call has taken that many optimiser steps
    (counted from where the runs resumed), as if interrupted.
    ordinary: one run with the ordinary model's arithmetic (`train_run`); else every run
    takes the stacked arithmetic of a pack from start to end, whatever the pack's width.
    progress_every_s: at most one progress line this often (`mbc.training.progress`); the
    crossing of tau and the early stop are always said.
    deadline: a `time.monotonic()` value; at the first step after it, return as if
    interrupted (each run resumes from its last resume point; none is finalized).
    batched_eval: runs that evaluate at the same step with evaluation batches of one shape
    are evaluated together (`evaluate_together`: every candidate in full, equal to the
    run's own evaluation to float32 rounding). None: on CUDA only, where one evaluation
    after another is bound by kernel launches; on a CPU each run evaluates on its own.
    """
    device = torch.device(device)
    for s in specs:
        check_train(s.train)
    if batched_eval is None:
        batched_eval = device.type == "cuda"
    records = [RunRecord(s, d, say, device=device) for s, d in zip(specs, run_dirs, strict=True)]
    states = [rec.resume() for rec in records]
    trained = [not rec.finished for rec in records]
    batches = [eval_batch(s, ds, device) for s, ds in zip(specs, datasets, strict=True)]
    evaluators = [ENGINES[s.train.engine] for s in specs]
    scratch = build_model(specs[0].model, specs[0].task, torch.Generator().manual_seed(0))
    scratch = scratch.to(device).train()
    progress = Progress(records, say, progress_every_s)
    taken = 0
    try:
        pack, group, views = None, [], []
        while active := [i for i, rec in enumerate(records) if not rec.finished]:
            step = min(records[i].step for i in active)
            behind = [i for i in active if records[i].step == step]  # they step next
            until = min((records[i].step for i in active if i not in behind), default=math.inf)
            pack = _regroup(
                pack,
                group,
                views,
                behind,
                records,
                states=states,
                data=(specs, datasets, device, ordinary),
            )
            group = behind
            views = [
                PackView(pack, j, scratch, evaluators[i], batches[i], datasets[i])
                for j, i in enumerate(group)
            ]
            for i, v in zip(group, views, strict=True):
                records[i].start(v)
            if len(records) > 1:
                say(
                    f"pack: {len(group)} run(s) from step {step}"
                    + ("" if until == math.inf else f" to {until}")
                )
            while True:
                losses, first = pack.step()
                step += 1
                taken += 1
                if batched_eval:
                    due = [j for j, i in enumerate(group) if step in records[i].eval_set]
                    evaluate_together(pack, views, due)
                done = [
                    records[i].after_step(step, losses[j], views[j], first_loss=first[j])
                    for j, i in enumerate(group)
                ]
                progress.report(step, len(group))
                if (stop_after is not None and taken >= stop_after) or (
                    deadline is not None and time.monotonic() > deadline
                ):
                    return trained
                if any(done) or step >= until:
                    break
    finally:
        for rec in records:
            rec.close()
    for s, d, fresh in zip(specs, run_dirs, trained, strict=True):
        if fresh and finalize:  # a run finished before keeps its tables (and their times)
            finalize_run(s, d)
    return trained


def _regroup(pack, group, views, behind, records, *, states, data) -> PackedRuns:
    """The pack that steps the runs `behind` (indices into `records`) next. Where they are the
    current pack's `group` less the runs that finished, that pack without their rows
    (`PackedRuns.subset`: every other run continues exactly as it would have); else (the
    first pack, or runs that were behind join the others) a new pack from each run's state.
    That case writes the current pack's unfinished runs' states (`PackView.resume_state`)
    into `states`, which holds each run's state to start the next pack from.
    data: (specs, datasets, device, ordinary) of every run, as `train_pack` got them."""
    specs, datasets, device, ordinary = data
    kept = [j for j, i in enumerate(group) if not records[i].finished]
    if pack is not None and [group[j] for j in kept] == behind:
        return pack.subset(kept)
    for j in kept:
        states[group[j]] = views[j].resume_state()
    return PackedRuns(
        [specs[i] for i in behind],
        [datasets[i] for i in behind],
        device,
        states=[states[i] for i in behind],
        step=records[behind[0]].step,
        ordinary=ordinary,
    )
