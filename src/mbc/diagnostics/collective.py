"""Collective transition (docs/method.md#collective-transition): per-group accuracy at
checkpoints from early to ~1.5 tau.

For a fixed sample of groups (200, or all when fewer), every selector of each group is a
context; a group's accuracy is the fraction of its K contexts whose argmax candidate is
right. "Incremental coverage" (H3) predicts many groups solved well before tau; a
collective snap predicts ~0 until tau and all soon after.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from mbc.training.data import STREAM_DIAG, Dataset, stream_seed
from mbc.training.metrics import candidate_loss_from_scores, make_eval_batch, target_logprobs

COLUMNS = ["run_id", "k", "tau", "step", "tau_fraction", "group", "accuracy"]
SUMMARY_COLUMNS = [
    "run_id",
    "k",
    "tau",
    "step",
    "tau_fraction",
    "frac_accurate",
    "mean_accuracy",
    "accurate_threshold",
]


def sample_groups(ds: Dataset, n_groups: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(stream_seed(seed, STREAM_DIAG))
    g = ds.task.n_groups
    return np.sort(rng.choice(g, size=min(n_groups, g), replace=False))


@torch.no_grad()
def group_accuracy(model, ds: Dataset, groups: np.ndarray, device) -> np.ndarray:
    """Accuracy of each sampled group: (n_sampled,), correct contexts / K."""
    k = ds.task.k
    examples = torch.as_tensor(groups[:, None] * k + np.arange(k)).reshape(-1)  # group-major
    batch = make_eval_batch(ds, examples, np.random.default_rng(0)).to(device)
    scores = target_logprobs(model, batch.candidates).double().sum(-1).view(-1, k)
    _, correct = candidate_loss_from_scores(scores, batch.target)
    return correct.view(len(groups), k).double().mean(1).cpu().numpy()


def collective_tables(
    run_id: str,
    k: int,
    tau: int | None,
    per_step: dict[int, np.ndarray],
    fractions: dict[int, float],
    groups: np.ndarray,
    accurate: float,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Tidy per-group table and its per-step summary."""
    rows, summ = [], []
    for step, acc in per_step.items():
        f = fractions[step]
        rows += [
            (run_id, k, tau, step, f, int(g), float(a)) for g, a in zip(groups, acc, strict=True)
        ]
        summ.append(
            (run_id, k, tau, step, f, float((acc >= accurate).mean()), float(acc.mean()), accurate)
        )
    return pd.DataFrame(rows, columns=COLUMNS), pd.DataFrame(summ, columns=SUMMARY_COLUMNS)
