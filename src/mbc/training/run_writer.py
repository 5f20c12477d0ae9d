"""What one run writes as it trains, under its `state/` (`mbc.core.layout`), no Snakemake
output: its log (one JSON object per line, read by mbc.core.journal.read_journal; its last line
is a `done` event once the run has finished), the resume point (model + optimiser + step,
written atomically at eval steps), the snapshots (post-hoc diagnostics), its TensorBoard
scalars and the provenance of every start; and the run's lock, held while it writes.
What to write, and when, is the record's (`mbc.training.record.RunRecord`).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from mbc.core import run_lock
from mbc.core.artifacts import (
    CorruptArtifactError,
    dumps_strict,
    torch_load_checked,
    torch_save_atomic,
    write_text_atomic,
)
from mbc.core.journal import keep_damaged, last_resume, read_journal
from mbc.core.layout import RunPaths
from mbc.core.provenance import now, start_event
from mbc.core.spec import RunSpec
from mbc.training import tensorboard_log


class RunWriter:
    """The files of one run: `open` (the lock and the log's rows as a resume finds them),
    `start` (the log opened for appending), the lines, then `close`."""

    def __init__(self, spec: RunSpec, paths: RunPaths, say: Callable[[str], None], device):
        self.spec, self.paths, self.say = spec, paths, say
        self.device = device  # named in the log's start events (mbc.measured)
        self._fh = None
        self._lock = None  # the run's lock, held from `open` to `close`
        self._tb = None  # TensorBoard scalars (config `tensorboard`), when switched on

    def open(self) -> list[dict]:
        """Hold the run's lock until `close` (`mbc.core.run_lock`: one writer per run) and
        read its log; a damaged one is kept aside first (the resume rewrites it)."""
        self._lock = run_lock.hold(self.paths.state)
        self.paths.snapshots.mkdir(parents=True, exist_ok=True)
        if (kept := keep_damaged(self.paths.log)) is not None:
            self.say(f"WARNING: {kept}")
        return read_journal(self.paths.log)

    def resume_point(self, rows: list[dict]) -> tuple[dict | None, list[dict]]:
        """(the resume point's state or None, the log's rows up to it). Corrupt state: a
        fresh start (None, [])."""
        if not self.paths.resume.exists():
            return None, []
        last = last_resume(rows)
        try:
            if last is None:
                raise CorruptArtifactError(f"{self.paths.resume}: no matching entry in log.jsonl")
            state = torch_load_checked(self.paths.resume, sha256=rows[last]["sha256"])
            if state["step"] != rows[last]["step"]:
                raise CorruptArtifactError(f"{self.paths.resume}: step does not match log.jsonl")
        except CorruptArtifactError as exc:
            self.say(f"WARNING: {exc}; starting this run from step 0")
            return None, []
        # The log is ordered: keep everything up to the resume point, drop what came after.
        return state, rows[: last + 1]

    def rewrite(self, rows: list[dict]) -> None:
        """The log as `rows` (atomically): what a resume keeps."""
        write_text_atomic(self.paths.log, "".join(_json_line(r) for r in rows))

    def start(self, step: int, rows: list[dict]) -> None:
        """Open the log for appending and the TensorBoard scalars at `step` (`rows`: the
        log so far), and log the code and the machine (mbc.measured)."""
        self._fh = open(self.paths.log, "a")  # noqa: SIM115 - closed by close()
        self._tb = tensorboard_log.open_run(self.spec, self.paths.dir, step, rows, self.say)
        self.line(start_event(step, self.device))

    def line(self, row: dict) -> None:
        """One line of the log, on disk before the run goes on."""
        self._fh.write(_json_line(row))
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def evaluation(self, row: dict) -> None:
        """An evaluation row: the log and the TensorBoard scalars."""
        self.line(row)
        if self._tb is not None:
            self._tb.add(row)

    def snapshot(self, step: int, weights: dict[str, torch.Tensor]) -> None:
        path = self.paths.snapshots / f"step_{step:09d}.pt"
        sha = torch_save_atomic(path, {k: v.cpu() for k, v in weights.items()})
        self.line({"event": "snapshot", "step": step, "path": path.name, "sha256": sha})

    def resume(self, step: int, state: dict, wall_s: float) -> None:
        """The resume point at `step` (`state`: model and optimiser) and its log mark."""
        sha = torch_save_atomic(self.paths.resume, {**state, "step": step})
        self.line({"event": "resume", "step": step, "sha256": sha, "wall_s": wall_s})

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        run_lock.release(self._lock)
        self._lock = None


def done_event(step: int) -> dict:
    """The log's last line once the run has finished."""
    return {"event": "done", "step": step, "time": now()}


def _json_line(row: dict) -> str:
    """One strict-JSON line: NaN and infinities (no value yet, or a diverged run's) are
    written as null."""
    return dumps_strict(row) + "\n"
