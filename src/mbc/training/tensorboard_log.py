"""A run's evaluations as TensorBoard scalars, `<outdir>/tensorboard/<run_id>/` (config.yaml:
`tensorboard`, off by default), so `tensorboard --logdir <outdir>/tensorboard` shows every
run live. An option, not a dependency: the writer is `torch.utils.tensorboard`, which needs
the `tensorboard` package (`pip install -e ".[tensorboard]"`); without it the switch is one
line at start-up and training goes on without scalars.

The switch reaches the training jobs through the environment (`MBC_TENSORBOARD=1`, set by
the workflow at start-up from the config), not as a rule parameter: a changed parameter
would make Snakemake retrain every run, and the switch changes no number. It is not part of
run ids either. `mbc.training.record.RunRecord` opens one `RunScalars` per run it trains,
packed or not, and hands it every evaluation row it logs. A run resumed with no scalars
yet (the switch turned on mid-run) first writes the rows its log already holds; a run
resumed with scalars purges those past its resume point, which it evaluates again.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Callable
from pathlib import Path

from mbc.core.layout import Layout
from mbc.core.spec import RunSpec

ENV = "MBC_TENSORBOARD"
INSTALL = 'pip install -e ".[tensorboard]"'
FLUSH_S = 30  # the scalars reach the disk at least this often (a live view)
_said = False


def enabled() -> bool:
    """The switch, as the workflow (or a caller) set it in the environment."""
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes")


def available() -> bool:
    """The optional `tensorboard` package is installed (torch's writer needs it)."""
    return importlib.util.find_spec("tensorboard") is not None


def missing_line() -> str:
    return (
        "mbc: tensorboard: true, but the tensorboard package is not installed "
        f"({INSTALL}): training goes on without TensorBoard scalars"
    )


def scalars(row: dict, spec: RunSpec) -> dict[str, float]:
    """The scalars of one evaluation row: L_cand (and / log K), accuracy, first-target
    loss, delta_z (whole answer and first token), gradient norm, training loss and the
    learning rate of that step. Values that do not exist yet (null, NaN) are left out."""
    from mbc.training.schedule import learning_rate  # torch: not at the workflow's start-up

    step = row["step"]
    out = {
        "L_cand": row.get("candidate_loss"),
        "L_cand_over_log_K": None,
        "accuracy": row.get("candidate_accuracy"),
        "first_target_loss": row.get("first_target_loss"),
        "delta_z": row.get("delta_z"),
        "delta_z_first": row.get("delta_z_first"),
        "grad_norm": row.get("grad_norm"),
        "train_loss": row.get("train_loss"),
        "lr": learning_rate(spec.train, step) if step >= 1 else None,
    }
    if out["L_cand"] is not None:
        out["L_cand_over_log_K"] = out["L_cand"] / spec.task.log_k
    return {k: float(v) for k, v in out.items() if v is not None and math.isfinite(v)}


class RunScalars:
    """The TensorBoard writer of one run."""

    def __init__(self, spec: RunSpec, log_dir: Path, step: int, rows: list[dict]):
        from torch.utils.tensorboard import SummaryWriter

        self.spec = spec
        fresh = not any(log_dir.glob("events.out.tfevents.*"))
        # purge what an earlier session wrote past the resume point (evaluated again; the
        # resume step itself stays logged), or everything on a restart from step 0
        purge = None if fresh else (step + 1 if step else 0)
        self.writer = SummaryWriter(str(log_dir), purge_step=purge, flush_secs=FLUSH_S)
        if fresh:  # the switch turned on mid-run: the curve so far first
            for row in rows:
                if "event" not in row:
                    self.add(row)

    def add(self, row: dict) -> None:
        for name, value in scalars(row, self.spec).items():
            self.writer.add_scalar(name, value, row["step"])

    def close(self) -> None:
        self.writer.close()


def open_run(
    spec: RunSpec, run_dir: str | os.PathLike, step: int, rows: list[dict], say: Callable
) -> RunScalars | None:
    """The run's writer when the switch is on and the package installed, else None (one
    line said per process when the package is missing). `rows`: the run's log so far."""
    global _said
    if not enabled():
        return None
    if not available():
        if not _said:
            say(missing_line())
            _said = True
        return None
    log_dir = Layout.of_run_dir(Path(run_dir).resolve()).tensorboard(spec.run_id)
    return RunScalars(spec, log_dir, step, rows)
