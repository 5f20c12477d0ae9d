"""What built a derived file, against what would build it now: its `.sha256` sidecar
(`mbc.core.artifacts`: bytes, identity, inputs, config) compared with this outdir's files
and this invocation's config. The start-up check (`mbc.workflow.integrity`), the run store
(`mbc.stored_runs`) and `mbc.measured` ask here."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from mbc.core.artifacts import (
    config_digest,
    digest_of,
    identity_of,
    outdir_of,
    read_sidecar,
    sha256_file,
)

# how `differs` and `other_inputs` begin a reason for a file that is intact but outdated
OUTDATED = ("was built under other settings", "holds ")
MISSING_INPUT = ", which is missing"  # a file built from one that is gone


def derived_files(outdir: str | os.PathLike) -> list[Path]:
    """The outdir's derived files that the start-up check reads: its tables (`*.csv`), the
    report's generated sources (`tex/**/*.tex`), its figures with their captions
    (`figures/*.pdf|png|tex`) and the report (`paper/*.pdf`)."""
    root = Path(outdir)
    found = [
        *root.glob("*.csv"),
        *root.glob("tex/**/*.tex"),
        *(p for ext in ("pdf", "png", "tex") for p in root.glob(f"figures/*.{ext}")),
        *root.glob("paper/*.pdf"),
    ]
    return sorted(p for p in found if p.is_file())


def differs(
    path: Path,
    inputs: bool = True,
    rebuilt: set[Path] = frozenset(),
    config: str | None = None,
    built: set[Path] = frozenset(),
) -> str | None:
    """Why the file is not the table its `.sha256` sidecar recorded: the sidecar names
    another table (another run's, copied in with its sidecar), the bytes differ, or (with
    `inputs`) the sidecar names inputs that are not this outdir's (a table copied in from
    another outdir with its sidecar). None without a sidecar. Inputs are compared by their
    own sidecars (no big file is read); one that changed after the table was written (newer
    than it) is no finding: Snakemake reruns the table for it anyway, nor is a missing one
    among `rebuilt` (resolved paths: tables the workflow rebuilds). `config`: the config id
    its rule reads now (`Config.config_ids`): a sidecar that recorded another was built under
    other settings, whatever path or `.snakemake/` record reached it. `built`: the files the
    workflow builds (as the outdir's paths spell them): a table whose input among them was
    deleted is intact but outdated, and goes to be rebuilt after it."""
    if (rec := read_sidecar(path)) is None:
        return None
    if rec.identity is not None and rec.identity != identity_of(path):
        return f"is {rec.identity}, by the checksum copied in with it"
    if sha256_file(path) != rec.digest:
        return "differs from the checksum written with it (cut or edited since)"
    if config is not None and rec.config is not None and rec.config != config_digest(config):
        return "was built under other settings (a config section its rule reads has changed)"
    root = outdir_of(path)
    for digest, rel in rec.inputs if inputs else ():  # none in a sidecar from before inputs
        src = root / rel
        if not src.is_file() and src.resolve() in rebuilt:
            continue  # rebuilt first, then this table again (its input is newer)
        if not src.is_file() and src in built:
            # intact, built from a table since deleted: goes with it, rebuilt after it
            return f"holds what {rel} gave{MISSING_INPUT}"
        if not src.is_file():
            return f"was built from {rel}, which this outdir does not have, by its checksum"
        if digest_of(src) != digest and src.stat().st_mtime <= path.stat().st_mtime:
            return f"was built from a {rel} other than this outdir's, by its checksum"
    return None


def other_inputs(path: Path, inputs_now: Iterable[str | os.PathLike]) -> str | None:
    """Why a table that stacks the runs (tau.csv, metrics.csv, a diagnostic's) was built from
    another set of runs than the config gives now (`only=` narrowed or widened since), by
    the inputs its sidecar recorded; None where it was not, or recorded none."""
    rec = read_sidecar(path)
    if rec is None or not rec.inputs:
        return None
    root = outdir_of(path)
    had = {rel for _, rel in rec.inputs}
    want = {os.path.relpath(os.path.abspath(p), os.path.abspath(root)) for p in inputs_now}
    if had == want:
        return None
    return (
        f"holds {len(had)} run file(s), not the {len(want)} this config gives "
        f"({len(want - had)} new, {len(had - want)} no longer asked for)"
    )


def pdf_stale(pdf: str | os.PathLike) -> str | None:
    """Why the report's PDF is not the one its sources give now (None: it is): no sidecar
    (built before sidecars, or not by the workflow), or a source or figure it was built from
    that has changed or gone since. Unlike `differs`, an input newer than the PDF counts:
    where latexmk is missing, nothing rebuilds the PDF for it."""
    rec = read_sidecar(pdf)
    if rec is None:
        return "no record of what it was built from"
    if sha256_file(pdf) != rec.digest:
        return "it differs from the checksum written with it"
    root = outdir_of(pdf)
    for digest, rel in rec.inputs:
        src = root / rel
        if not src.is_file() or digest_of(src) != digest:
            return f"{rel} has changed since it was built"
    return None
