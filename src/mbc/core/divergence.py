"""Divergence (docs/method.md#divergence): a run whose losses have left every trainable range.

A run has diverged at the first logged row (an evaluation of its weights, with the mean
training loss of the steps since the row before) where the training loss, the evaluation
loss or the candidate loss is non-finite, or above `train.divergence_factor` x log(vocabulary)
(a model that predicts uniformly scores log(vocabulary); 100 x that is a probability
below e^-369 on the right token, which no trainable model reaches). One test, read by the
trainer (`mbc.training.record.RunRecord`, which stops the run there) and by the run summary
(`mbc.diagnostics.summary`, which reads it back from metrics.csv), so the two never disagree.

A diverged run is not censored: it did not survive its budget on the plateau, it stopped
being a measurement. The analysis treats it as config `diverged:` declares
(`mbc.analysis.diverged`).
"""

from __future__ import annotations

import math

from mbc.core.spec import VOCAB, TrainSpec

CHECKED = ("train_loss", "loss", "candidate_loss")


def bound(train: TrainSpec) -> float:
    """The largest loss (nats per target token) of a run that has not diverged."""
    return train.divergence_factor * math.log(VOCAB)


def divergence(row: dict, limit: float) -> str | None:
    """Why `row` (a log row or a metrics.csv row) shows a diverged run, or None.
    The step-0 row has no training loss yet (NaN there is not divergence); a column the
    row does not have is not read."""
    for name in CHECKED:
        if name not in row or (name == "train_loss" and row.get("step", 0) == 0):
            continue
        v = row.get(name)
        v = math.nan if v is None else float(v)  # null in the log: a non-finite value
        if not math.isfinite(v):
            return f"{name} is {v}"
        if v > limit:
            return f"{name} = {v:.4g} > {limit:.4g}"
    return None
