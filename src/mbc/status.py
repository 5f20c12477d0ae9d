"""Where every run of a preset stands: `python -m mbc.status [--preset quick]`.

One row per run, read from what the training jobs leave on disk (nothing is started):
  done         summary.json written (tau, or censored when the run never crossed)
  diverged     stopped as diverged (docs/method.md#divergence); `step` is where
  trained      its log says finished (or metrics.csv written), not yet summarised
  incomplete   summarised, but its metrics.csv is missing: the next `snakemake` rebuilds
               its tables from the run's log (nothing retrains)
  running      the live log (state/log.jsonl) changed within the last --stale-s seconds,
               and the process holding the run's lock is not known to have ended
  failed       a job that trained it (alone, or its pack) logged a traceback and the live
               log has gone quiet (or its process has ended)
  interrupted  the same without an error (killed, pre-empted): the next `snakemake`
               resumes it from its last checkpoint
  pending      nothing on disk yet
with the last evaluated step / budget, L_cand / log K there, and tau once crossed.

--plot FILE.png (or .pdf): also draw every run's L_cand / log K so far (mbc.planning.curves).
--config takes the workflow's overrides, KEY=VALUE as `snakemake --config` does
(preset=quick outdir=/scratch/q 'only=["E1"]'); an item without `=` names the base config.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import pandas as pd
import yaml

from mbc import config as mbc_config
from mbc.core import run_lock
from mbc.core.journal import finished, logged_divergence, logged_tau, read_journal
from mbc.core.layout import Layout
from mbc.core.packing import configured_packs, pack_of
from mbc.core.spec import RunSpec

COLUMNS = [
    "state",
    "experiments",
    "k",
    "d",
    "seed",
    "step",
    "budget",
    "lcand_over_log_k",
    "tau",
    "run_id",
]


def _last_rows(log: Path) -> tuple[dict | None, int | None, int | None, bool]:
    """(last evaluation row, tau, diverged step, finished) of a live log; a torn last line
    is ignored."""
    rows = read_journal(log)
    last = next((r for r in reversed(rows) if "event" not in r), None)
    return last, logged_tau(rows), logged_divergence(rows), finished(rows)


def run_state(
    outdir: str, run_id: str, spec: RunSpec, now: float, stale_s: float, pack_id: str | None = None
) -> dict:
    """The row of one run. `pack_id`: the pack it trains in (pack.enabled): a failure is
    then in that pack's job log, not in a `train` log."""
    layout = Layout(outdir)
    paths = layout.run(run_id)
    log = paths.log
    row = {
        "run_id": run_id,
        "k": spec.task.k,
        "d": spec.task.d,
        "seed": spec.seed,
        "budget": spec.train.max_steps,
        "step": None,
        "lcand_over_log_k": None,
        "tau": None,
    }
    summary = paths.summary
    if summary.exists():
        try:
            s = json.loads(summary.read_text())
            row.update(step=s.get("steps"), tau=s.get("tau"))
            row["state"] = (
                "diverged" if s.get("diverged") else "censored" if s.get("censored") else "done"
            )
        except json.JSONDecodeError:
            row["state"] = "failed"  # a corrupt summary: the next run rewrites it
        if not paths.metrics.exists():
            row["state"] = "incomplete"  # not done: a table a statistic reads is missing
    if log.exists():
        last, tau, diverged, done = _last_rows(log)
        if last is not None:
            lc = last.get("candidate_loss")
            row["step"] = row["step"] or last["step"]
            row["lcand_over_log_k"] = None if lc is None else lc / math.log(spec.task.k)
        row["tau"] = row["tau"] if row["tau"] is not None else tau
        if diverged is not None:  # the trainer stopped it: final, summarised or not
            row.update(state="diverged", step=diverged)
        if "state" not in row:
            if paths.metrics.exists() or done:  # a packed run's tables come after its pack
                row["state"] = "trained"
            elif now - log.stat().st_mtime < stale_s and not _holder_gone(log.parent):
                row["state"] = "running"
            else:
                jobs = [layout.log("train", run_id)]
                jobs += [layout.log("train_pack", pack_id)] if pack_id else []
                row["state"] = "failed" if any(map(_traceback, jobs)) else "interrupted"
    row.setdefault("state", "pending")
    return row


def _holder_gone(state_dir: Path) -> bool:
    """The process that last held the run's lock ran on this machine and has ended
    (`mbc.core.run_lock.local_holder`): a log written moments ago is then a killed job's,
    not a live one. A holder that cannot be checked from here (a cluster node, an older
    lock line, none) leaves the log's age to decide: False."""
    if (pid := run_lock.local_holder(state_dir)) is None:
        return False
    try:
        os.kill(pid, 0)  # signal 0: is there such a process
    except ProcessLookupError:
        return True
    except OSError:  # there is one, another user's: alive
        return False
    return False


def _traceback(job_log: str) -> bool:
    return Path(job_log).exists() and "Traceback" in Path(job_log).read_text(errors="replace")


def status(cfg: mbc_config.Config, stale_s: float = 300.0) -> pd.DataFrame:
    now = time.time()
    exps: dict[str, list[str]] = {}
    for r in cfg.runs:
        exps.setdefault(r.run_id, []).append(r.experiment)
    packed = pack_of(configured_packs(cfg.specs, cfg.raw.get("pack", {})))
    rows = [
        {
            **run_state(cfg.outdir, rid, spec, now, stale_s, packed.get(rid)),
            "experiments": ",".join(exps[rid]),
        }
        for rid, spec in cfg.specs.items()
    ]
    table = pd.DataFrame(rows, columns=COLUMNS)
    return table.sort_values(["experiments", "k", "d", "seed"], kind="stable", ignore_index=True)


def report(table: pd.DataFrame, preset: str, say=print) -> None:
    counts = table.state.value_counts()
    say(f"preset {preset}: {len(table)} runs; " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    shown = table.assign(
        lcand_over_log_k=table.lcand_over_log_k.map(lambda v: "" if pd.isna(v) else f"{v:.3f}"),
        step=table.step.map(lambda v: "" if pd.isna(v) else f"{int(v):,}"),
        tau=table.tau.map(lambda v: "" if pd.isna(v) else f"{int(v):,}"),
    )
    say(shown.to_string(index=False))


def main(argv: list[str] | None = None) -> pd.DataFrame:
    from mbc.core.cli import figure_file, positive_float

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--preset", default="paper", help="paper or a preset of config.yaml")
    ap.add_argument(
        "--config",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="the workflow's --config overrides; a FILE (no '=') is the base "
        "config (default config.yaml)",
    )
    ap.add_argument("--outdir", default=None, help="override the preset's outdir")
    ap.add_argument(
        "--stale-s",
        type=positive_float,
        default=300.0,
        help="a live log quiet this long means the job is not running",
    )
    ap.add_argument(
        "--plot",
        type=figure_file,
        default=None,
        metavar="FILE",
        help="draw every run's loss curve so far into FILE (.png or .pdf)",
    )
    a = ap.parse_args(argv)
    base = [c for c in a.config if "=" not in c]
    overrides = {"preset": a.preset} | ({"outdir": a.outdir} if a.outdir else {})
    try:
        overrides |= parse_overrides([c for c in a.config if "=" in c])
        raw = mbc_config.read_yaml(base[-1] if base else "config.yaml")
        cfg = mbc_config.load(raw, overrides)
    except (mbc_config.ConfigFileError, mbc_config.ConfigError) as exc:
        raise SystemExit(f"mbc.status: {exc}") from None
    table = status(cfg, a.stale_s)
    report(table, cfg.preset)
    if a.plot:
        from mbc.planning.curves import plot_curves

        t0 = time.perf_counter()
        plot_curves(cfg, a.plot, dict(zip(table.run_id, table.state, strict=True)))
        print(f"curves: {a.plot} ({time.perf_counter() - t0:.1f} s)")
    return table


def parse_overrides(items: list[str]) -> dict:
    """KEY=VALUE items as `snakemake --config` reads them: each value as YAML (numbers,
    booleans, lists, mappings), else the string as written."""
    out = {}
    for item in items:
        key, _, text = item.partition("=")
        try:
            out[key] = yaml.safe_load(text)
        except yaml.YAMLError:
            out[key] = text
    return out


if __name__ == "__main__":
    from mbc.core.cli import run

    run(main)
