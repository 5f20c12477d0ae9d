"""Start-up check of every per-run artefact, so that a plain `snakemake all` repairs damage.

Snakemake reruns a job when its output is missing *and* a job that needs to run wants it;
a deleted run directory under an up-to-date tau.csv is therefore never rebuilt. `scan`
runs in the main Snakemake process while the Snakefile is parsed, and only reads. For each
run it follows the chain its files form (README: Reliability):

    dataset -> train (metrics.csv, checkpoints.csv, snapshots) -> summary.json -> diagnostics

and finds the first broken link: a missing file, a dataset or table whose sha256 differs
from its sidecar or whose sidecar names another artefact or inputs that are not this
outdir's (a file swapped in with its own sidecar), a run's table or diagnostic whose
sidecar is gone while the run's tables have theirs, a log with a line that is not JSON
before its last, a snapshot listed in checkpoints.csv that is missing (or, with
`verify=full`, whose sha256 differs from the index) in a run that a diagnostic reads. A
dry run lists what the repair would do, and changes nothing; an inspection command
(`--lint`, `--summary`, ...) neither lists nor changes. An invocation that runs jobs repairs
while the Snakefile is parsed, under the outdir's hold (`outdir_hold.take_outdir`), before
Snakemake plans anything: `repair` moves a corrupt file aside
(`*.corrupt-<time>`, nothing is lost; an outdir table without a sidecar,
`*.unverified-<time>`), deletes what was derived from it (the run's later links and the
aggregated tables, all regenerable) and keeps `state/` (training resumes from it) unless a
snapshot is bad or missing (the run is retrained: the same seed gives the same bits on a
CPU; its old `state/` is kept as `state.corrupt-<time>`, or `state.replaced-<time>` when
its snapshots were only missing, as for a run trained on a lent device). A packed run
(`pack.enabled`) to be trained again also has its pack's manifest deleted, so that its pack
runs again. The outdir's own tables are checked the same way (`altered_tables`, `move_aside`,
`unverified_tables`). Every file a repair touches is then missing, and so is every
aggregated table above a broken run: Snakemake, planning from the repaired outdir, rebuilds
the missing files that the targets need, and every job downstream of a rebuilt file runs
again, in this one process (no forced job, no second start).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from mbc.core.artifacts import (
    read_sidecar,
    read_sidecar_sha256,
    sha256_file,
    sidecar,
)
from mbc.core.built_by import MISSING_INPUT, OUTDATED, derived_files, differs, other_inputs
from mbc.core.journal import damage, finished, read_journal
from mbc.core.layout import METRICS, RunPaths

MAX_LISTED = 10  # findings listed one per line; more absent runs are counted


@dataclass
class RunFiles:
    """The artefacts of one run, link by link."""

    run_id: str
    dataset: Path
    train: list[Path]  # metrics.csv, checkpoints.csv
    summary: Path
    diagnostics: list[Path] = field(default_factory=list)
    pack: Path | None = None  # the manifest of the pack that trains it (pack.enabled)

    @property
    def run_dir(self) -> Path:
        return self.summary.parent


@dataclass
class Finding:
    run_id: str
    level: int  # 0 dataset, 1 train, 2 summary, 3 diagnostics
    path: Path
    why: str
    corrupt: bool  # the file exists but is bad (moved aside); else it is missing
    retrain: bool = False  # a snapshot is bad: state/ goes too


def _snapshot_finding(f: RunFiles, verify: bool) -> Finding | None:
    index_path = f.train[1]
    try:
        index = pd.read_csv(index_path)
        rows = list(zip(index["path"], index["sha256"], strict=True))
    except Exception as exc:  # a damaged index: the run's train link is broken
        return Finding(f.run_id, 1, index_path, f"unreadable checkpoint index ({exc})", True)
    for rel, digest in rows:
        snap = f.run_dir / rel
        if not snap.is_file():
            # e.g. a run trained on a lent device, whose snapshots stayed there
            why = "snapshot missing (a diagnostic reads this run: it is retrained to write them)"
            return Finding(f.run_id, 1, snap, why, False, retrain=True)
        if verify and sha256_file(snap) != digest:
            return Finding(f.run_id, 1, snap, "snapshot checksum mismatch", True, retrain=True)
    return None


def scan(
    runs: list[RunFiles],
    aggregates: list[Path],
    verify_snapshots: bool = False,
    built_under: Mapping[Path, str] | None = None,
) -> list[Finding]:
    """The first broken link of every run that should be complete: one whose aggregated
    tables exist, or that has any file of its own. A later link merely absent before any
    table built from it exists (a trained run whose summary or a diagnostic is still to
    come, as in a long run stopped and resumed) is no finding: the tables' jobs want it, so
    Snakemake builds it: there is nothing to repair. Built from the
    summaries and diagnostics: every aggregated table but metrics.csv (the train link's)."""
    tables_exist = any(p.exists() for p in aggregates)
    later_tables_exist = any(p.exists() for p in aggregates if p.name != METRICS)
    checked_datasets: dict[Path, Finding | None] = {}
    out = []
    for f in runs:
        own = [*f.train, f.summary, *f.diagnostics]
        if not tables_exist and not any(p.exists() for p in own):
            continue  # not built yet: Snakemake builds it
        if f.dataset not in checked_datasets:
            finding = None
            if not f.dataset.is_file():
                finding = Finding(f.run_id, 0, f.dataset, "dataset missing", False)
            elif (why := _dataset_mismatch(f.dataset)) is not None:
                finding = Finding(f.run_id, 0, f.dataset, why, True)
            checked_datasets[f.dataset] = finding
        if checked_datasets[f.dataset] is not None:
            d = checked_datasets[f.dataset]
            out.append(Finding(f.run_id, 0, d.path, d.why, d.corrupt))
            continue
        if not any(p.exists() for p in own):
            why = "no outputs (a run new to the config, or its directory was deleted)"
            out.append(Finding(f.run_id, 1, f.run_dir, why, False))
            continue
        missing = next((p for p in f.train if not p.is_file()), None)
        if missing is not None:
            out.append(Finding(f.run_id, 1, missing, "missing", False))
            continue
        paths = RunPaths(f.run_dir)
        if not paths.log.is_file():
            # the run's tables without the log they were written from: its history is gone,
            # so it is trained again (a stored run is restored whole before this check)
            why = "missing beside the run's tables: the run is trained again"
            out.append(Finding(f.run_id, 1, paths.log, why, False, retrain=True))
            continue
        # train_log.csv is written with them (`finalize_run`) though no rule declares it: a
        # damaged or missing one is rebuilt with them, from the run's log (no retraining)
        log_table = paths.train_log
        if not log_table.is_file() and _logs_windows(paths.log):
            why = "missing: rebuilt from the run's log with its tables (nothing retrained)"
            out.append(Finding(f.run_id, 1, log_table, why, False))
            continue
        written = [*f.train, log_table] if log_table.is_file() else f.train
        if (bad := _altered(f, 1, written, built_under)) is not None:
            out.append(bad)
            continue
        if (hurt := damage(log := RunPaths(f.run_dir).log)) is not None:
            # its tables would be rebuilt from a cut log: train the rest again (its job
            # keeps the damaged log aside and resumes from the resume point before it)
            why = (
                f"line {hurt[0]} of {hurt[1]} is not JSON: the run trains on from its last "
                "resume point before it"
            )
            out.append(Finding(f.run_id, 1, log, why, False))
            continue
        # snapshots are a link only toward the diagnostics: a run no diagnostic reads is
        # complete without them (its snapshots may have stayed where it trained)
        # ... and a run restored from the run store (mbc.run_store) has its diagnostics
        # from the store, not its snapshots, which stayed where it trained
        from_store = RunPaths(f.run_dir).stored.is_file() and all(
            p.is_file() for p in f.diagnostics
        )
        snap = _snapshot_finding(f, verify_snapshots) if f.diagnostics and not from_store else None
        if snap is not None:
            out.append(snap)
            continue
        if not f.summary.is_file():
            if later_tables_exist or any(p.exists() for p in f.diagnostics):
                out.append(Finding(f.run_id, 2, f.summary, "missing", False))
            continue  # else trained, not summarised yet: the tables' jobs build it
        if bad := _unparsable(f.run_id, f.summary) or _altered(f, 2, [f.summary], built_under):
            out.append(bad)
            continue
        gone = next((p for p in f.diagnostics if not p.is_file()), None)
        if gone is not None and later_tables_exist:  # (else not built yet, as above)
            out.append(Finding(f.run_id, 3, gone, "missing", False))
        elif (
            bad := _altered(f, 3, [p for p in f.diagnostics if p.is_file()], built_under)
        ) is not None:
            out.append(bad)
    return out


def _logs_windows(log: Path) -> bool:
    """Whether a run's log holds the author's training-log windows (train_log.csv's rows):
    a log from before they were logged has none, and its run no train_log.csv."""
    with open(log, "rb") as fh:
        return any(b'"event": "train_window"' in line for line in fh)


def _dataset_mismatch(path: Path) -> str | None:
    """Why a dataset file is not the one its name says, by its sidecar: the bytes differ,
    or the sidecar names another dataset (its file and sidecar copied over this one's)."""
    rec = read_sidecar(path)
    if rec is None:
        return None
    if rec.identity is not None and rec.identity != path.name.removesuffix(".pt"):
        return f"holds dataset {rec.identity}, by the checksum copied in with it"
    return "dataset checksum mismatch" if sha256_file(path) != rec.digest else None


def _unparsable(run_id: str, summary: Path) -> Finding | None:
    """A summary.json that is not JSON, where no checksum was written with it (an older
    outdir): found here, so one rerun heals it (the job reading it would move it aside
    and fail, and only the next rerun would rebuild it)."""
    if read_sidecar_sha256(summary) is not None:
        return None  # the checksum already decides
    try:
        json.loads(summary.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        return Finding(run_id, 2, summary, f"not valid JSON ({exc})", True)
    return None


def _altered(
    f: RunFiles, level: int, paths: list[Path], built_under: Mapping[Path, str] | None = None
) -> Finding | None:
    """The first table that is not what its checksum recorded (`differs`: rows cut, a line
    torn, an edit, another's file, inputs not this outdir's), or without one while the
    run's own tables have one (its sidecar deleted: unverified): it is rebuilt from what it
    derives from (a run's tables from its log, which says the run finished: no retraining;
    a diagnostic from the run's snapshots). A run whose tables were all written before
    checksums were recorded (no sidecar) is not checked, its diagnostics included. A
    diagnostic from before sidecars beside a run's tables that have them is older than its
    summary.json, which Snakemake reruns it for anyway: taking it as unverified costs no
    extra rebuild."""
    for p in paths:
        if why := differs(p, config=(built_under or {}).get(p)):
            return Finding(f.run_id, level, p, why, True)
        siblings = (*f.train, f.summary)
        if read_sidecar(p) is None and any(map(read_sidecar, siblings)):
            why = "no checksum beside it, while the run's other tables have one (unverified)"
            return Finding(f.run_id, level, p, why, True)
    return None


def altered_tables(
    outdir: str | os.PathLike,
    skip: Iterable[Path] = (),
    rebuilt: Iterable[Path] = (),
    built_under: Mapping[Path, str] | None = None,
    inputs_of: Mapping[Path, list[str]] | None = None,
    built: set[Path] = frozenset(),
) -> list[tuple[Path, str]]:
    """(file, why) of the outdir's derived files (`derived_files`) that `differ` from their
    sidecars: bytes, inputs, or (`built_under`: path -> the config id its rule reads now)
    the config they were built under, or (`inputs_of`: a stacked table -> the run files
    it stacks now) the set of runs they stack. `skip`: tables the repair deletes anyway (the
    aggregated tables, where a run's chain is broken), checked for their own bytes only:
    one built from a run directory since deleted is not said to be altered too, while an
    edited one still is. `rebuilt`: tables the workflow builds from the runs (the aggregated
    ones); one of them missing as an input is no finding (the repair deleted it, or it was
    never built: Snakemake builds it, then reruns the tables built from it, whose input is
    then newer)."""
    skipped = set(skip)
    rebuilt = {Path(p).resolve() for p in rebuilt}
    config = built_under or {}
    found = []
    for p in derived_files(outdir):
        report = p.suffix == ".pdf" and p.parent.name == "paper"
        if report and p not in built:
            continue  # a report nothing rebuilds (no latexmk): the last line says it is stale
        # the report is checked for its own bytes: one whose sources changed is rebuilt after
        # them where it is asked for, and named stale where it is not (never deleted)
        why = differs(p, p not in skipped and not report, rebuilt, config.get(p), built)
        if why is None and p in (inputs_of or {}):
            why = other_inputs(p, inputs_of[p])
        if why is not None:
            found.append((p, why))
    return found


def move_aside(found: list[tuple[Path, str]], dry_run: bool = False) -> list[str]:
    """Move aside each table `altered_tables` found, so that it is rebuilt, not deleted:
    `<table>.superseded-<time>` where it was built under other settings or from other runs
    (intact, only outdated), else `<table>.corrupt-<time>`; one line per table. Under
    `dry_run` nothing moves and the lines say what a real run would do."""
    lines = []
    for p, why in found:
        kind = "superseded" if why.startswith(OUTDATED) else "corrupt"
        aside = p.with_name(f"{p.name}.{kind}-{int(time.time())}")
        done = "would be moved aside" if dry_run else f"moved aside to {aside.name}"
        lines.append(f"{p}: {why}, {done} so that it is rebuilt")
        if not dry_run:
            p.rename(aside)
    return lines


def unverified_tables(outdirs: set[Path], built: set[Path] | None = None) -> list[Path]:
    """The outdirs' derived files without a checksum beside them (deleted, or an outdir from
    before checksums): an edit to one would spread downstream unseen, so it is rebuilt.
    `built`: the files the workflow builds; any other (a user's own file) is left alone."""
    return sorted(
        p
        for d in outdirs
        for p in derived_files(d)
        if read_sidecar(p) is None and (built is None or p in built)
    )


def _derived(f: RunFiles, level: int) -> list[Path]:
    """The run's files that derive from a broken link at `level`: a broken dataset or
    train link rebuilds the train tables (from the log, or by training on), and every link
    after the broken one is rebuilt."""
    links = [f.train, [f.summary], f.diagnostics]
    return [
        p
        for at, paths in enumerate(links, start=1)
        if at > level or at == level == 1
        for p in paths
    ]


def _pack_again(f: RunFiles, fd: Finding) -> bool:
    """Whether the run's pack must run again: the run's tables come from its log, so only
    a run to train (again or on) needs it (the pack's finished runs are not retrained:
    their logs say done)."""
    return (
        f.pack is not None
        and f.pack.exists()
        and (fd.retrain or not finished(read_journal(RunPaths(f.run_dir).log)))
    )


def repair_all(
    outdir: str | os.PathLike,
    altered: list[tuple[Path, str]],
    findings: list[Finding],
    runs: list[RunFiles],
    aggregates: list[Path],
    built: set[Path],
    dry_run: bool = False,
    **checked,
) -> list[str]:
    """The start-up's whole repair, one console line per action: the outdir's altered tables
    moved aside (`move_aside`), then the runs' broken links (`repair`, which also moves the
    unverified tables aside), then, pass after pass, every derived file built from one of
    them, now missing (`altered_tables`, deleted by `drop_stale`; `checked`: its
    `built_under` and `inputs_of`).
    Snakemake does not rebuild a missing file under a present one it trusts (a deleted tau.csv
    under statistics.csv, when scorecard.csv is asked for): each file on the way from the
    damage to any target must be missing for the DAG to rebuild it. Under `dry_run` nothing
    changes and the lines say what a real run would do (its first pass only)."""
    lines = [*move_aside(altered, dry_run), *repair(findings, runs, aggregates, dry_run, built)]
    while lines and not dry_run and (more := altered_tables(outdir, built=built, **checked)):
        lines += drop_stale(more)
    return [f"mbc: repair: {x}" for x in lines]


def drop_stale(found: list[tuple[Path, str]]) -> list[str]:
    """Delete each derived file built from one the repair removed, with its sidecar: it is
    regenerable and now stale, and Snakemake would not rebuild the removed file under it.
    Any other finding (an edited table) is moved aside, as before (`move_aside`)."""
    stale = [p for p, why in found if why.endswith(MISSING_INPUT)]
    lines = move_aside([f for f in found if f[0] not in stale])
    for p in stale:
        p.unlink()
        sidecar(p).unlink(missing_ok=True)
    if stale:  # one line: they are many (every figure above a rebuilt tau.csv), and derived
        names = ", ".join(p.name for p in stale[:MAX_LISTED])
        more = f" and {len(stale) - MAX_LISTED} more" if len(stale) > MAX_LISTED else ""
        lines.append(
            f"{len(stale)} file(s) built from what the repair removed, deleted so that they "
            f"are rebuilt: {names}{more}"
        )
    return lines


def repair(
    findings: list[Finding],
    runs: list[RunFiles],
    aggregates: list[Path],
    dry_run: bool = False,
    built: set[Path] | None = None,
) -> list[str]:
    """Move corrupt files aside and delete what derives from them; one line per action.
    Under `dry_run` nothing changes and the lines say what a real run would do. `built`:
    the files the workflow builds (an unverified one is moved aside and rebuilt; a user's
    own file in the outdir is left alone)."""
    by_id = {f.run_id: f for f in runs}
    stamp = int(time.time())
    lines: list[str] = []
    for p in unverified_tables({a.parent for a in aggregates}, built):
        aside = f"{p.name}.unverified-{stamp}"
        lines.append(
            f"{p}: no checksum beside it (unverified), "
            + (f"would be moved aside to {aside}" if dry_run else f"moved aside to {aside}")
            + " so that it is rebuilt"
        )
        if not dry_run:
            p.rename(p.with_name(aside))
    shown = 0
    doomed: set[Path] = set()
    kept_aside: set[Path] = set()  # corrupt files moved aside, not deleted
    for fd in findings:
        f = by_id[fd.run_id]
        quiet = not fd.corrupt and shown >= MAX_LISTED  # a long list of absent runs: counted
        if fd.corrupt and fd.path.exists():
            moved = "would be moved aside" if dry_run else "moved aside"
            lines.append(f"{fd.path}: {fd.why}, {moved} to {fd.path.name}.corrupt-{stamp}")
            kept_aside.add(fd.path)
            if not dry_run:
                fd.path.rename(fd.path.with_name(f"{fd.path.name}.corrupt-{stamp}"))
        elif not quiet:
            lines.append(f"{fd.path}: {fd.why}")
        shown += not quiet
        doomed.update(p for p in _derived(f, fd.level) if p.exists())
        if _pack_again(f, fd):
            lines.append(f"{f.pack}: deleted, its pack trains {fd.run_id} again")
            doomed.add(f.pack)
        if fd.retrain and (state := RunPaths(f.run_dir).state).exists():
            # kept, log included: `replaced` when nothing in it was bad (snapshots missing)
            aside = f"state.{'corrupt' if fd.corrupt else 'replaced'}-{stamp}"
            lines.append(f"{state}: moved aside to {aside} (the run is retrained)")
            if not dry_run:
                state.rename(state.with_name(aside))
    if len(findings) > shown:
        lines.append(f"... and {len(findings) - shown} more run(s) without outputs")
    if findings:
        doomed.update(p for p in aggregates if p.exists())
        doomed -= kept_aside  # (under a dry run still there)
        lines.append(
            f"{len(doomed)} derived file(s) deleted so that the next jobs rebuild them"
            + (" (dry run: nothing changed)" if dry_run else "")
        )
        if not dry_run:
            for p in doomed:
                p.unlink(missing_ok=True)
    return lines
