"""Reading a run's journal, `<run_dir>/state/log.jsonl`, written as it trains
(`mbc.training.run_writer`): one JSON object per line, evaluation rows and `event` rows (tau,
snapshot, resume, `diverged` when the run stopped as diverged, and `done` last once the run
has finished). The other logs have their own words: the author's training log
(`mbc.training.author_log`, train_log.csv) and a Snakemake job's log (`mbc.workflow.job_log`).

Every reader goes through `read_journal`: the training job when it resumes and when it writes
metrics.csv, `mbc.status`, `mbc.estimate` and the tests that wait for a resume point.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

# an evaluation row's fields, in metrics.csv's order (`finalize_run` writes the journal's rows)
METRIC_COLUMNS = [
    "step",
    "examples_seen",
    "train_loss",
    "loss",
    "first_target_loss",
    "candidate_loss",
    "candidate_accuracy",
    "shuffled_loss",
    "delta_z",
    "first_target_shuffled_loss",
    "delta_z_first",
    "grad_norm",
    "wall_s",
]


def read_journal(path: str | Path) -> list[dict]:
    """The log's rows up to its first line that is not complete JSON: a torn last line (a
    job killed mid-write, or a line still being written when another process reads) is
    dropped, and so is everything after a corrupt line, which a resume must not trust.
    A log not written yet reads as no rows."""
    try:  # undecodable bytes become a line that is not JSON, where reading stops
        text = Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return []
    rows = []
    for line in text.splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


def damage(path: str | Path) -> tuple[int, int] | None:
    """(number, count) of the log's first line that is not JSON before its last line:
    damage, not a torn last line (a kill mid-write). None: the log is sound or absent."""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return None
    for n, line in enumerate(lines[:-1], start=1):
        try:
            json.loads(line)
        except json.JSONDecodeError:
            return n, len(lines)
    return None


def keep_damaged(path: str | Path) -> str | None:
    """A damaged log (`damage`) is copied aside as `log.jsonl.corrupt-<time>` before the
    resume rewrites it from the rows before the damage; the one line saying so."""
    path = Path(path)
    if (found := damage(path)) is None:
        return None
    aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
    shutil.copy2(path, aside)
    return (
        f"{path}: line {found[0]} of {found[1]} is not JSON; the log as it was is kept as "
        f"{aside.name}, and the run goes on from its last resume point before that line"
    )


def finished(rows: list[dict]) -> bool:
    """The run has finished: its log ends in the `done` event (its tables can be written
    from it, and it is not trained again)."""
    return bool(rows) and rows[-1].get("event") == "done"


def last_resume(rows: list[dict]) -> int | None:
    """The index of the log's last resume mark (None: none): the resume point a restart
    loads, and where its log is cut."""
    return next((i for i in range(len(rows) - 1, -1, -1) if rows[i].get("event") == "resume"), None)


def resume_point(rows: list[dict]) -> int:
    """The step of the run's last resume point (0: none), where a restart continues."""
    i = last_resume(rows)
    return 0 if i is None else rows[i]["step"]


def _logged_crossing(rows: list[dict], event: str) -> int | None:
    return next((r[event] for r in rows if r.get("event") == event), None)


def logged_tau(rows: list[dict]) -> int | None:
    """tau as the training job logged it (its `tau` event), None before the crossing."""
    return _logged_crossing(rows, "tau")


def logged_first_target_tau(rows: list[dict]) -> int | None:
    """The first-target crossing as the training job logged it (its `first_target_tau`
    event, logged only by runs whose early stop waits for it), None before it."""
    return _logged_crossing(rows, "first_target_tau")


def logged_divergence(rows: list[dict]) -> int | None:
    """The step at which the training job stopped the run as diverged (its `diverged`
    event, mbc.core.divergence), None for a run that has not diverged."""
    return next((r["step"] for r in rows if r.get("event") == "diverged"), None)
