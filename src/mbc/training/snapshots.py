"""Loading saved model snapshots and choosing the ones at given phases of a run."""

from __future__ import annotations

import os

import pandas as pd
import torch

from mbc.core.artifacts import CorruptArtifactError, read_csv_checked, torch_load_checked
from mbc.core.layout import RunPaths
from mbc.core.spec import RunSpec
from mbc.training.model import build_model


def read_index(run_dir: str | os.PathLike) -> pd.DataFrame:
    return read_csv_checked(RunPaths(run_dir).checkpoints, required=["step", "path", "sha256"])


def nearest(index: pd.DataFrame, step: float) -> int:
    """The snapshot step closest to `step` (ties: the earlier one)."""
    if index.empty:
        raise CorruptArtifactError("no snapshots in checkpoints.csv")
    steps = index["step"].to_numpy()
    return int(steps[abs(steps - step).argmin()])


def load_model(spec: RunSpec, run_dir, index: pd.DataFrame, step: int, device) -> torch.nn.Module:
    """The model of `spec` with the weights saved at `step` (checksum verified), in eval mode."""
    row = index.loc[index["step"] == step].iloc[0]
    paths = RunPaths(run_dir)
    try:
        state = torch_load_checked(paths.dir / row["path"], sha256=row["sha256"])
    except CorruptArtifactError as exc:
        # A snapshot cannot be rebuilt alone: retraining the run (deterministic) rebuilds
        # all of them, so the run's outputs and state are invalidated together.
        raise CorruptArtifactError(
            f"{exc} (snapshot of run {paths.dir.name}; the run will be retrained)",
            exc.path,
            invalidate=[paths.checkpoints, paths.metrics, paths.state],
        ) from exc
    model = build_model(spec.model, spec.task, torch.Generator().manual_seed(0))
    model.load_state_dict(state)
    return model.to(device).eval()


def phase_steps(index: pd.DataFrame, tau: int | None, fractions) -> list[tuple[float, int]]:
    """(fraction, snapshot step) for each fraction of tau; distinct steps, in order.

    A censored run (no tau) has no phases: diagnostics report it as censored instead.
    """
    if tau is None:
        return []
    out, seen = [], set()
    for f in fractions:
        s = nearest(index, f * tau)
        if s not in seen:
            seen.add(s)
            out.append((float(f), s))
    return out
