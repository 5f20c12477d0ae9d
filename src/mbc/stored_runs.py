"""The run store: finished runs committed to the repository, so that a measurement outlives
the machine that trained it (its command: `python -m mbc.run_store`).

A run is stored once it has finished and every diagnostic the config asks of it is built:
one directory `<store>/<run_id>/` (config key `store`; `auto`: `measured/<preset>/runs`)
holding its files gzipped (the log, its tables, its summary and its diagnostic tables, each
with its `.sha256` sidecar) and `entry.json`, the run's binding: its spec (whose hash is the
run id's), the code that trained it (each session's commit, from the log), the config
sections its summary and diagnostics read (`mbc.core.frozen.content_id`, the ids the rules
pass), the dataset's sha256 and each file's. Its snapshots are not stored (about 20 MB a run
at paper size), only their sha256 (the run's checkpoints.csv): a stored run's diagnostics
come from the store, and a run whose diagnostic the config changed is trained again.

Why our own store, not Snakemake's between-workflow cache (`cache:`, `--cache`): its key
covers a rule's script, params and inputs, but not the package modules a script imports nor
config read as globals, so a changed package would be served stale results; the Slurm
executor ignores `--cache`; and a cache entry is one rule's output, not a run's whole chain
(log, tables, summary, diagnostics) bound to the run id that names it. The store is plain
files under git, read by this module alone.

At start-up (workflow/rules/startup.smk, before the integrity check) `restore` puts every
stored run that the outdir lacks, or holds only in part, back into the outdir: the dataset
made where it is missing and compared with the entry's digest, the run's files checked
against the entry, a partial run directory moved aside to `<outdir>/superseded/` (nothing is
lost), mtimes in the chain's order so that Snakemake takes them as up to date. Nothing
trains and no diagnostic reruns for a stored run. An entry that does not match its binding
(another spec, a changed config section, a file whose bytes differ, a dataset other than
this one) is refused in one line, and the run is trained as if it had not been stored.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from mbc.core.artifacts import read_sidecar, sha256_file, write_text_atomic
from mbc.core.built_by import differs
from mbc.core.journal import damage, finished, read_journal
from mbc.core.layout import DIAGNOSTIC_FILES, Layout, RunPaths

FORMAT = 1
ENTRY = "entry.json"


def store_dir(cfg) -> Path | None:
    """The preset's store (config key `store`): `auto` is `measured/<preset>/runs`; an
    empty string switches the store off."""
    where = str(cfg.raw.get("store", "auto"))
    if not where:
        return None
    return Path(f"measured/{cfg.preset}/runs" if where == "auto" else where)


# ---- what a run's outputs are, and what they were built from


def diagnostic_paths(cfg, layout: Layout, run_id: str) -> dict[str, list[str]]:
    """diagnostic -> the run's tables of it, for each diagnostic the config asks of the run."""
    return {
        kind: [layout.diagnostic(kind, run_id, sfx) for sfx in suffixes]
        for kind, suffixes in DIAGNOSTIC_FILES.items()
        if run_id in cfg.diagnosed_runs(kind)
    }


def run_outputs(cfg, layout: Layout, run_id: str) -> list[str]:
    """Every file of a finished run that the analysis reads, as paths under the outdir:
    its log and tables (their sidecars travel with them), summary and diagnostics."""
    paths = RunPaths(layout.run_dir(run_id))
    own = [paths.log, paths.metrics, paths.checkpoints, paths.train_log, paths.summary]
    diags = [p for ps in diagnostic_paths(cfg, layout, run_id).values() for p in ps]
    return [*map(str, own), *diags]


def binding(cfg, run_id: str) -> dict:
    """What the current config says a run's outputs are built from: its spec and the content
    id of each config section its summary and diagnostics read (the rules' `config_id`)."""
    ids = cfg.config_ids()  # the rules' own (`Config.config_ids`)
    sections = {"summary": ids["summarize_run"]}
    for kind in diagnostic_paths(cfg, Layout(cfg.outdir), run_id):
        sections[kind] = ids[kind]
    return {"spec": cfg.specs[run_id].to_dict(), "config": sections}


def _rel(layout: Layout, path: str | os.PathLike) -> str:
    return os.path.relpath(path, layout.root)


def _stored_name(rel: str, run_id: str) -> str:
    """A file's name in its entry: the run's own files by name, a diagnostic's table as
    `<diagnostic><suffix>.csv` (`hessian.csv`, `collective_summary.csv`); gzipped."""
    p = Path(rel)
    if p.parts[0] == "diagnostics":
        return f"{p.parts[1]}{p.name.removeprefix(run_id)}.gz"
    return f"{p.name}.gz"


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)  # the same bytes every time


class EntryError(ValueError):
    """A stored file that cannot be read or is not what its entry records."""


def stored_bytes(entry_dir: Path, f: dict) -> bytes:
    """A stored file's bytes, checked against the sha256 its entry records."""
    path = entry_dir / f["stored"]
    try:
        data = gzip.decompress(path.read_bytes())
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise EntryError(f"{path} unreadable ({exc})") from exc
    if hashlib.sha256(data).hexdigest() != f["sha256"]:
        raise EntryError(f"{path} differs from the sha256 its entry records")
    return data


# ---- adding finished runs


def not_ready(cfg, layout: Layout, run_id: str) -> str | None:
    """Why a run cannot be stored yet (None: it can): not finished, a file missing, or a
    table that is not what its checksum recorded."""
    paths = RunPaths(layout.run_dir(run_id))
    if not finished(read_journal(paths.log)):
        return "not finished"
    if damage(paths.log) is not None:
        return "its log has a damaged line"
    for path in run_outputs(cfg, layout, run_id)[1:]:
        if not Path(path).is_file():
            return f"{_rel(layout, path)} not built yet"
        if read_sidecar(path) is None:
            return f"{_rel(layout, path)} has no checksum beside it"
        if why := differs(Path(path)):
            return f"{_rel(layout, path)} {why}"
    return None


def _trained_by(rows: list[dict]) -> list[dict]:
    """Each training session's code and machine, from the log's `start` events."""
    keys = ("time", "commit", "dirty", "host", "cpu", "device", "threads", "torch")
    return [{k: r.get(k) for k in keys} for r in rows if r.get("event") == "start"]


def write_entry(cfg, layout: Layout, run_id: str, store: Path) -> Path:
    """Store one finished run (`not_ready` is None): its files gzipped and its binding, in
    a temporary directory renamed into place, so that a killed `add` leaves no half entry."""
    spec = cfg.specs[run_id]
    dataset = Path(layout.dataset(spec.dataset_id))
    files = {}
    store.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=store, prefix=f".{run_id}."))
    try:
        for path in run_outputs(cfg, layout, run_id):
            rel = _rel(layout, path)
            name = _stored_name(rel, run_id)
            data = Path(path).read_bytes()
            (tmp / name).write_bytes(_gzip(data))
            files[rel] = {"stored": name, "sha256": sha256_file(path)}
            if (side := Path(f"{path}.sha256")).is_file():
                (tmp / name.replace(".gz", ".sha256")).write_bytes(side.read_bytes())
        index = pd.read_csv(RunPaths(layout.run_dir(run_id)).checkpoints)
        entry = {
            "format": FORMAT,
            "run_id": run_id,
            "spec_hash": spec.content_hash,
            **binding(cfg, run_id),
            "dataset": {"id": spec.dataset_id, "sha256": sha256_file(dataset)},
            "trained_by": _trained_by(read_journal(RunPaths(layout.run_dir(run_id)).log)),
            "files": files,
            "snapshots": dict(zip(index["path"], index["sha256"], strict=True)),
            "stored": f"{datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}",
        }
        (tmp / ENTRY).write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n")
        for p in tmp.iterdir():
            p.chmod(0o644)
        tmp.chmod(0o755)
        final = store / run_id
        os.replace(tmp, final)  # an existing entry is never replaced (add skips stored runs)
        return final
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def add(cfg, store: Path) -> tuple[list[str], dict[str, str]]:
    """Store every finished run of the outdir that is not stored yet: (stored now, and why
    each other unstored run was left)."""
    layout = Layout(cfg.outdir)
    added, left = [], {}
    for run_id in cfg.specs:
        if (store / run_id / ENTRY).is_file():
            continue
        if why := not_ready(cfg, layout, run_id):
            left[run_id] = why
            continue
        write_entry(cfg, layout, run_id, store)
        added.append(run_id)
    return added, left


# ---- restoring stored runs into an outdir


def read_entry(entry_dir: Path) -> dict:
    entry = json.loads((entry_dir / ENTRY).read_text())
    if entry.get("format") != FORMAT:
        raise ValueError(f"format {entry.get('format')!r}, not {FORMAT}")
    return entry


def mismatch(cfg, entry: dict) -> str | None:
    """Why an entry is not this config's run (None: it is): another spec under the run
    id, or a config section its summary or a diagnostic read that has changed since, or a
    diagnostic the config now asks of it that it was stored without."""
    run_id = entry["run_id"]
    want = binding(cfg, run_id)
    if entry.get("spec") != want["spec"]:
        return "its spec is not the config's for this run id"
    have = entry.get("config", {})
    for section, cid in want["config"].items():
        if section not in have:
            return f"stored without its {section} diagnostic, which the config now asks for"
        if have[section] != cid:
            where = "diagnostics.summary" if section == "summary" else f"diagnostics.{section}"
            return f"config section {where} changed since it was stored"
    return None


def in_place(layout: Layout, entry: dict) -> bool:
    """Whether the outdir already holds every file of the entry, byte for byte."""
    for rel, f in entry["files"].items():
        path = Path(layout.root) / rel
        if not path.is_file() or sha256_file(path) != f["sha256"]:
            return False
    return True


@dataclass
class Restore:
    """What `restore` did (or, in a dry run, would do)."""

    store: Path | None
    stored: int = 0  # entries of this config's runs
    restored: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)

    def lines(self, dry_run: bool = False) -> list[str]:
        if self.store is None or not self.stored and not self.refused:
            return []
        verb = "would come" if dry_run else "came"
        out = [
            f"mbc: store {self.store}/: {self.stored} of this config's runs stored; "
            f"{len(self.restored)} {verb} from it into the outdir, nothing retrained"
        ]
        out += [
            f"mbc: store: {r}: refused, {why}: it is trained" for r, why in self.refused.items()
        ]
        return out


def restore(cfg, dry_run: bool = False) -> Restore:
    """Put every stored run of this config that the outdir does not hold whole back into
    the outdir (see the module's docstring). A dry run only counts."""
    store = store_dir(cfg)
    result = Restore(store)
    if store is None or not store.is_dir():
        return result
    layout = Layout(cfg.outdir)
    specs = cfg.specs
    for entry_dir in sorted(p for p in store.iterdir() if p.is_dir() and p.name in specs):
        run_id = entry_dir.name
        try:
            entry = read_entry(entry_dir)
        except (OSError, ValueError) as exc:
            result.refused[run_id] = f"{entry_dir / ENTRY} unreadable ({exc})"
            continue
        if entry.get("run_id") != run_id:
            result.refused[run_id] = f"{entry_dir / ENTRY} names run {entry.get('run_id')}"
            continue
        result.stored += 1
        if in_place(layout, entry):
            continue
        if why := mismatch(cfg, entry):
            result.refused[run_id] = why
            continue
        if dry_run:
            result.restored.append(run_id)
            continue
        if why := _restore_one(cfg, layout, entry_dir, entry):
            result.refused[run_id] = why
        else:
            result.restored.append(run_id)
    return result


def _restore_one(cfg, layout: Layout, entry_dir: Path, entry: dict) -> str | None:
    """Restore one entry; why it could not be (nothing then changed in the outdir but its
    dataset, made where missing)."""
    run_id = entry["run_id"]
    spec = cfg.specs[run_id]
    dataset = Path(layout.dataset(spec.dataset_id))
    if not dataset.is_file():
        from mbc.runs_pipeline import make_dataset  # torch: only where a dataset is made

        with contextlib.redirect_stdout(io.StringIO()):  # its job's line, not the banner's
            make_dataset(spec.task, spec.seed, dataset)
    if sha256_file(dataset) != entry["dataset"]["sha256"]:
        return f"its dataset differs from {dataset} made here"
    # stage every file beside the outdir's, checked, before anything in place moves
    stage = Path(tempfile.mkdtemp(dir=layout.cache.parent, prefix=f".restore-{run_id}."))
    try:
        staged = []
        for rel, f in entry["files"].items():
            name = f["stored"]
            try:
                data = stored_bytes(entry_dir, f)
            except EntryError as exc:
                return str(exc)
            (stage / name).write_bytes(data)
            side = entry_dir / name.replace(".gz", ".sha256")
            staged.append((stage / name, Path(layout.root) / rel, side))
        _move_aside(layout, run_id, [dst for _, dst, _ in staged])
        # the chain's order in time: dataset, training tables, summary, diagnostics
        now = time.time()
        if dataset.stat().st_mtime > now - 4:
            os.utime(dataset, (now - 4, now - 4))
        for src, dst, side in staged:
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
            if side.is_file():
                shutil.copyfile(side, f"{dst}.sha256")
            level = 1 if "diagnostics" in dst.parts else 2 if dst.name == "summary.json" else 3
            for p in (dst, Path(f"{dst}.sha256")):
                if p.exists():
                    os.utime(p, (now - level, now - level))
        write_text_atomic(
            RunPaths(layout.run_dir(run_id)).stored, json.dumps(entry, indent=1) + "\n"
        )
        return None
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _move_aside(layout: Layout, run_id: str, paths: list[Path]) -> None:
    """A partial run directory and any diagnostic table of the run, moved to
    `<outdir>/superseded/<time>/` (nothing is lost)."""
    here = [Path(layout.run_dir(run_id)), *(p for p in paths if "diagnostics" in p.parts)]
    here = [p for p in here if p.exists()]
    if not here:
        return
    aside = Path(layout.root) / "superseded" / f"{int(time.time())}"
    for p in here:
        dst = aside / p.relative_to(layout.root)
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(p, dst)
        if Path(f"{p}.sha256").exists():
            os.replace(f"{p}.sha256", f"{dst}.sha256")


def summary_lines(cfg, store: Path) -> list[str]:
    """How much of the preset is stored, by experiment."""
    stored = {p.name for p in store.iterdir() if (p / ENTRY).is_file()} if store.is_dir() else set()
    ids = list(cfg.specs)
    lines = [f"{store}/: {len(stored & set(ids))} of {len(ids)} runs stored"]
    for exp in dict.fromkeys(r.experiment for r in cfg.runs):
        mine = cfg.run_ids(exp)
        lines.append(f"  {exp}: {len(stored & set(mine))} of {len(mine)}")
    return lines


def check(cfg, store: Path) -> list[str]:
    """Every entry of this config's runs against its binding and its files' bytes."""
    problems = []
    if not store.is_dir():
        return problems
    for entry_dir in sorted(p for p in store.iterdir() if p.is_dir()):
        try:
            entry = read_entry(entry_dir)
        except (OSError, ValueError) as exc:
            problems.append(f"{entry_dir}: {ENTRY} unreadable ({exc})")
            continue
        if entry_dir.name not in cfg.specs:
            problems.append(f"{entry_dir}: not a run of this config")
            continue
        if why := mismatch(cfg, entry):
            problems.append(f"{entry_dir}: {why}")
        for f in entry["files"].values():
            try:
                stored_bytes(entry_dir, f)
            except EntryError as exc:
                problems.append(str(exc))
    return problems
