"""The measured report of a preset, committed with the code that produced it.

    python -m mbc.measured --preset paper_cpu [--config config.yaml] [--dest measured]

copies the small tables of a finished outdir and its PDF into `measured/<preset>/` and
writes `PROVENANCE` from what the runs' logs recorded at every start of their training
(`mbc.core.provenance`): the commits, the start and end times, the wall time, the total
training steps (and each experiment's, by device), the training jobs' active time, the
CPU, the threads, and whether any run was resumed. Nothing there is typed by hand, and
nothing there is edited afterwards: a change of defaults that moves the run ids either
re-measures or adds a `STALE` file naming the change (`check`).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import re
import shutil
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from mbc import config as mbc_config
from mbc.core.arithmetic import Arithmetic
from mbc.core.artifacts import read_sidecar, write_text_atomic
from mbc.core.built_by import differs, pdf_stale
from mbc.core.journal import finished, read_journal
from mbc.core.layout import Layout
from mbc.core.packing import configured_packs
from mbc.core.provenance import code_version

TABLES = ("tau", "fits", "statistics", "hypotheses", "scorecard", "robustness", "init_scale")


def ids_digest(run_ids) -> str:
    return hashlib.sha256("\n".join(sorted(run_ids)).encode()).hexdigest()[:16]


def _commit(version: dict) -> str:
    """A code version (`mbc.core.provenance.code_version`, or a log's start event) as
    PROVENANCE writes it."""
    label = version.get("commit") or "unknown"
    return label + (" (with uncommitted changes)" if version.get("dirty") else "")


def read_logs(outdir: Path, run_ids: list[str]) -> dict[str, list[dict]]:
    """run id -> its log's rows, read once for every PROVENANCE line."""
    layout = Layout(str(outdir))
    return {r: read_journal(layout.run(r).log) for r in run_ids}


def provenance(logs: dict[str, list[dict]]) -> list[str]:
    """PROVENANCE's lines, from the runs' logs (`read_logs`: `start` and `done` events)."""
    run_ids = list(logs)
    starts, ends, resumed, missing = [], [], [], []
    for r, rows in logs.items():
        s = [x for x in rows if x.get("event") == "start"]
        if not s:
            missing.append(r)
        starts += s
        ends += [x["time"] for x in rows if x.get("event") == "done" and "time" in x]
        if any(x["step"] > 0 for x in s):
            resumed.append(r)
    commits = Counter(_commit(x) for x in starts)
    times = sorted(x["time"] for x in starts)
    lines = [
        f"runs: {len(run_ids)} (run ids: tau.csv; sha256 of the sorted ids {ids_digest(run_ids)})"
    ]
    lines += [f"commit: {c} ({n} training start(s))" for c, n in commits.most_common()]
    if times and ends:
        hours = (_epoch(max(ends)) - _epoch(times[0])) / 3600
        lines += [
            f"started: {times[0]}",
            f"ended: {max(ends)}",
            f"wall time: {hours:.2f} h from the first start to the last end",
        ]
    for key, what in (
        ("device", "device"),
        ("cpu", "CPU"),
        ("threads", "threads per training job"),
        ("torch", "torch"),
        ("host", "host"),
    ):
        # a start logged before a key was (the device: 806b55a) says so, not "None"
        values = Counter(
            _device(x) if key == "device" else str(x.get(key, "not logged")) for x in starts
        )
        lines.append(f"{what}: " + ", ".join(f"{v} ({n})" for v, n in values.most_common()))
    lines.append(
        f"resumed: {'yes' if resumed else 'no'} ({len(resumed)} of {len(run_ids)} runs resumed"
        " from a resume point at least once)"
    )
    if missing:
        lines.append(
            f"runs whose logs record no start (trained before provenance was logged): {len(missing)}"
        )
    return lines


def _device(start: dict) -> str:
    """A start's device; one logged before the device was (806b55a) names its torch build
    instead (a `+cpu` build ran on the CPU)."""
    if "device" in start:
        return str(start["device"])
    return f"not logged (torch {start['torch']})" if "torch" in start else "not logged"


def _steps_by_device(rows: list[dict], final_step: int) -> Counter:
    """The steps a run kept, by the device that trained them: each start trains from its
    step to the next start's (the resume point it resumed from: steps trained past it and
    lost to a kill count nowhere) or, for the last, to the run's final step."""
    starts = [x for x in rows if x.get("event") == "start"]
    if not starts:
        return Counter({"not logged": final_step})
    ends = [x["step"] for x in starts[1:]] + [final_step]
    # steps before the first logged start (a log begun mid-run) count as not logged
    out = Counter({"not logged": starts[0]["step"]} if starts[0]["step"] > 0 else {})
    for x, end in zip(starts, ends, strict=True):
        out[_device(x)] += end - x["step"]
    return out


def _sessions(rows: list[dict]) -> list[tuple[dict, float]]:
    """(start event, active seconds) of each training session in a run's log, a session
    running from one start to the next. The trainer's clock (`wall_s`) goes on from the
    resume point's reading and the log keeps only what that point kept
    (`mbc.training.record`), so the sessions' times add up to the run's clock: time lost
    to a kill past a resume point, and the gaps between jobs, count nowhere. Time before a
    log's first start (a log begun before starts were logged) is a session of its own."""
    out, start, begin, clock = [], {}, 0.0, 0.0
    for x in rows:
        if x.get("event") == "start":
            if start or clock > begin:
                out.append((start, clock - begin))
            start, begin = x, clock
        elif x.get("wall_s") is not None:
            clock = max(clock, float(x["wall_s"]))  # kept rows may come out of order
    if start or clock > begin:
        out.append((start, clock - begin))
    return out


# the runs of a pack log their starts within seconds of each other
SAME_JOB_S = 120


def _jobs(logs: dict[str, list[dict]], pack_of: dict[str, str]) -> list[tuple[float, str]]:
    """(active seconds, device) of every training job, from the runs' sessions: a job's
    time is the longest of its runs' (the runs of a pack share one clock). The job a
    session ran in is the one its start logged (`job`); for a start logged before that key
    was, its host and its run's pack under the config at hand (two packs are never one
    job), starts within SAME_JOB_S of the job's first."""
    keyed: dict[str, tuple[float, str]] = {}
    loose: dict[tuple, list[tuple[float, float, str]]] = {}
    for r, rows in logs.items():
        for start, seconds in _sessions(rows):
            device = _device(start) if start else "not logged"
            if "job" in start:
                keyed[start["job"]] = max(keyed.get(start["job"], (0.0, device)), (seconds, device))
                continue
            base = (start.get("host"), pack_of.get(r, r))
            t = _epoch(start.get("time"))
            loose.setdefault(base, []).append((t, seconds, device))
    jobs = list(keyed.values())
    for sessions in loose.values():
        first, best = None, None
        for t, seconds, device in sorted(sessions, key=lambda x: x[0]):
            if first is None or t - first > SAME_JOB_S:
                if best is not None:
                    jobs.append(best)
                first, best = t, (seconds, device)
            else:
                best = max(best, (seconds, device))
        if best is not None:
            jobs.append(best)
    return jobs


def _epoch(time_text: str | None) -> float:
    """A start's UTC time in seconds (0 where it logged none: such starts are one job)."""
    if not time_text:
        return 0.0
    return datetime.strptime(time_text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def training_time(logs: dict[str, list[dict]], packs: dict[str, list[str]]) -> list[str]:
    """PROVENANCE's line of training job time, from the runs' logs (`read_logs`): every
    training job once (`_jobs`), by the device it ran on. `packs`: the config's packs, for
    logs from before the job key was logged."""
    pack_of = {r: p for p, members in packs.items() for r in members}
    jobs = _jobs(logs, pack_of)
    by_device: Counter = Counter()
    for seconds, device in jobs:
        by_device[device] += seconds
    if not sum(by_device.values()):
        return []
    total = sum(by_device.values()) / 3600
    devices = "; ".join(f"{d} {s / 3600:.2f} h" for d, s in by_device.most_common())
    return [
        f"training job time: {total:.2f} h in {len(jobs)} training job(s) ({devices}); each"
        " job's active time from its runs' logs (a pack of runs is one job), time lost to kills"
        " and the gaps between jobs not counted"
    ]


def steps_by_experiment(logs: dict[str, list[dict]], tau: pd.DataFrame) -> list[str]:
    """PROVENANCE's lines of training steps per experiment, by device (what the README's
    presets table quotes as each part's cost), from the runs' logs (`read_logs`). A run that
    two experiments list counts in both."""
    by_run = {}
    for r, steps in tau.drop_duplicates("run_id").set_index("run_id")["steps"].items():
        by_run[r] = _steps_by_device(logs[r], int(steps))
    every = sum(by_run.values(), Counter())
    lines = ["steps by device: " + "; ".join(f"{d} {n:,}" for d, n in every.most_common())]
    for exp, runs in tau.groupby("experiment", sort=False)["run_id"]:
        total = sum((by_run[r] for r in runs.unique()), Counter())
        devices = "; ".join(f"{d} {n:,}" for d, n in total.most_common())
        lines.append(f"steps {exp}: {total.total():,} in {runs.nunique()} run(s) ({devices})")
    return lines


def _unverified(path: Path, sidecar_needed: bool = True) -> str | None:
    """Why a table cannot be trusted as written by the pipeline, or None: missing, no
    checksum written with it (a sidecar gone: an aggregated table, which a plain rerun
    rebuilds with one; a run's table from before sidecars passes), or not what its checksum
    records (`mbc.core.built_by.differs`: bytes that differ, another table's file, or one
    built from another outdir's inputs), as the start-up check finds it."""
    if not path.is_file():
        return f"{path} is missing"
    if read_sidecar(path) is None:
        return f"{path} has no checksum beside it (unverified)" if sidecar_needed else None
    return f"{path} {why}" if (why := differs(path)) else None


def incomplete(cfg: mbc_config.Config, logs: dict[str, list[dict]]) -> list[str]:
    """What keeps the outdir from being the complete, intact record of its preset: every
    table verified, every configured run in tau.csv with its directory, its finished log
    and its verified tables. Empty: the report may be committed. The runs' problems come
    first: a run's directory deleted is the cause, the tables built from it follow."""
    layout = Layout(cfg.outdir)
    tables = [why for t in TABLES if (why := _unverified(Path(layout.table(t))))]
    problems = []
    tau_path = Path(layout.table("tau"))
    tau_ok = _unverified(tau_path) is None  # read only as it was written
    in_tau = set(pd.read_csv(tau_path).run_id) if tau_ok else set()
    for r in cfg.specs:
        run = layout.run(r)
        if not run.dir.is_dir():
            problems.append(f"run {r}: its directory {run.dir} is missing")
            continue
        if not finished(logs[r]):
            problems.append(f"run {r}: {run.log} does not record it finished")
        problems += [why for p in (run.metrics, run.summary) if (why := _unverified(p, False))]
        if tau_ok and r not in in_tau:
            problems.append(f"run {r}: not in {tau_path}")
    for r in sorted(in_tau - set(cfg.specs)):
        problems.append(f"{tau_path} lists run {r}, which the config does not give")
    return problems + tables


def collect(preset: str, config_path: str, dest: str, overrides: dict | None = None) -> Path:
    """Copy the preset's tables and PDF into dest/<preset>/ and write PROVENANCE; an outdir
    that is not complete and intact (`incomplete`) is refused in one line, nothing written."""
    collector = _commit(code_version())  # before writing: what it writes is not the code
    cfg = mbc_config.load(
        mbc_config.read_yaml(config_path), {"preset": preset, **(overrides or {})}
    )
    out, layout = Path(cfg.outdir), Layout(cfg.outdir)
    pdf = Path(cfg.raw["paper_pdf"])
    if pdf.exists() and (stale := pdf_stale(pdf)):
        raise SystemExit(
            f"mbc.measured: {pdf} is not the report of these tables ({stale}), nothing "
            "written; rebuild it (snakemake all, with latexmk) or delete it"
        )
    logs = read_logs(out, sorted(cfg.specs))
    if problems := incomplete(cfg, logs):
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise SystemExit(
            f"mbc.measured: {out}/ is not complete and intact, nothing written: {problems[0]}"
            f"{more}; rebuild it first (snakemake all --config preset={preset} outdir={out})"
        )
    tau = pd.read_csv(layout.table("tau"))
    target = Path(dest) / preset
    if blocked := next(
        (p for p in [target, *target.parents] if p.exists() and not p.is_dir()), None
    ):
        raise SystemExit(
            f"mbc.measured: --dest {dest}: {blocked} is not a directory, nothing written"
        )
    if target.resolve() == out.resolve() or out.resolve() in target.resolve().parents:
        raise SystemExit(
            f"mbc.measured: --dest {dest}: {target} is the outdir's own tree ({out}), nothing "
            "written; collect into measured/ or another folder"
        )
    target.mkdir(parents=True, exist_ok=True)
    for t in TABLES:
        src = Path(layout.table(t))
        shutil.copyfile(src, target / src.name)
    if pdf.exists():
        shutil.copyfile(pdf, target / "main.pdf")
    run_ids = sorted(set(tau.run_id))
    steps = int(pd.to_numeric(tau.drop_duplicates("run_id")["steps"]).sum())
    lines = [f"preset: {preset}", f"outdir: {out}"]
    logs = {r: logs[r] for r in run_ids}
    lines += provenance(logs)
    if cfg.arithmetic is not None:  # what `auto` chose: check() rebuilds the ids with it
        lines.append(f"arithmetic: {cfg.arithmetic.matrix_unit} ({cfg.arithmetic.why()})")
        # whole, timing included: without AMX the probe's timing decides the precision
        lines.append(f"arithmetic resolved: {cfg.arithmetic.to_env()}")
    lines.append(f"total training steps: {steps:,}")
    lines += training_time(logs, configured_packs(cfg.specs, cfg.raw["pack"]))
    lines += steps_by_experiment(logs, tau)
    lines.append(
        f"collected: {datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ} by python -m mbc.measured at "
        + collector
    )
    write_text_atomic(target / "PROVENANCE", "\n".join(lines) + "\n")
    (target / "STALE").unlink(missing_ok=True)  # measured anew with this config
    return target


def recorded_arithmetic(report: Path, run_ids: set[str]) -> Arithmetic:
    """The arithmetic a committed report was measured with, so that its run ids are checked
    against the config as resolved *there*, not on the machine running the check: the
    PROVENANCE line `arithmetic resolved: <json>` (the probe's timing with it, which decides
    the precision without AMX), else `arithmetic: <matrix unit> (...)`; before either line
    existed, the run ids say it (bf16 ones were trained on a CPU with AMX)."""
    text = (report / "PROVENANCE").read_text() if (report / "PROVENANCE").exists() else ""
    if m := re.search(r"^arithmetic resolved: (\{.*\})$", text, re.M):
        with contextlib.suppress(ValueError, TypeError):
            return Arithmetic.from_env(m.group(1))
    if m := re.search(r"^arithmetic: (\w+) \((.*)\)$", text, re.M):
        return Arithmetic("cpu", m.group(1), f"recorded in PROVENANCE: {m.group(2)}")
    bf16 = any("-bf16-" in r for r in run_ids)
    return Arithmetic("cpu", "amx" if bf16 else "none", "inferred from the run ids' precision")


def check(measured: Path, config_path: str) -> list[str]:
    """Problems with the committed reports under `measured/`: a tau.csv whose run ids are not
    the ones the current config gives its preset, without a STALE file saying why."""
    problems = []
    raw = mbc_config.read_yaml(config_path)
    for d in sorted(p for p in Path(measured).iterdir() if p.is_dir()):
        ids = set(pd.read_csv(d / "tau.csv").run_id)
        arithmetic = recorded_arithmetic(d, ids)
        want = set(mbc_config.load(raw, {"preset": d.name}, arithmetic=arithmetic).specs)
        if ids != want and not (d / "STALE").exists():
            problems.append(
                f"{d}/tau.csv: {len(ids - want)} run ids the config no longer gives and "
                f"{len(want - ids)} it gives that were not measured: re-measure, or add "
                f"{d}/STALE naming the change"
            )
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", required=True)
    ap.add_argument("--config", default="config.yaml")
    ap.add_argument("--dest", default="measured")
    ap.add_argument("--outdir", default=None, help="the preset's outdir, if not the config's")
    args = ap.parse_args(argv)
    try:
        extra = {"outdir": args.outdir} if args.outdir else None
        target = collect(args.preset, args.config, args.dest, extra)
    except (mbc_config.ConfigError, mbc_config.ConfigFileError) as exc:
        print(f"mbc.measured: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a --dest that cannot be made or written: nothing was moved in
        print(
            f"mbc.measured: --dest '{args.dest}': {exc.strerror} ({exc.filename}), nothing written",
            file=sys.stderr,
        )
        return 2
    print(f"mbc.measured: wrote {target}/ ({', '.join(sorted(p.name for p in target.iterdir()))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
