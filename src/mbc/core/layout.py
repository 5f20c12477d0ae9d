"""Where every artefact of a preset lies: a run's directory, a pack's manifest, the outdir's
logs, per-run diagnostics, aggregated tables, figures and the paper's sources.

Spelled here once and read by the Snakefile, the training record, `mbc.status`, the
banner, the estimate and the rule adapters. Outdir paths are strings `<outdir>/<rest>`,
not `Path`s: Snakemake matches targets and outputs as written, and `Path` would drop a
leading `./`, changing the files a rule names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from mbc.core.config_references import ConfigError

# A run's files, relative to its directory. state/ holds what must survive an
# interruption and is no Snakemake output (Snakemake deletes a failed job's outputs).
STATE = "state"
LOG = f"{STATE}/log.jsonl"  # append-only evaluation log (mbc.core.journal)
RESUME = f"{STATE}/resume.pt"  # model + optimiser + step of the last resume point
SNAPSHOTS = f"{STATE}/snapshots"  # weights for the post-hoc diagnostics
METRICS = "metrics.csv"
CHECKPOINTS = "checkpoints.csv"  # the snapshots, by paths relative to the run directory
TRAIN_LOG = "train_log.csv"
SUMMARY = "summary.json"
STORED = f"{STATE}/stored.json"  # the run store's entry, where the run came from the store

# A run's diagnostic tables: diagnostic -> the suffixes of its files
# (`diagnostics/<diagnostic>/<run_id><suffix>.csv`)
DIAGNOSTIC_FILES = {
    "collective": ("", "_summary"),
    "routing": ("_attention", "_ablation"),
    "hessian": ("",),
}


class RunPaths:
    """The files of one run directory (`<outdir>/runs/<run_id>`)."""

    def __init__(self, run_dir: str | os.PathLike):
        self.dir = Path(run_dir)
        self.state = self.dir / STATE
        self.log = self.dir / LOG
        self.resume = self.dir / RESUME
        self.snapshots = self.dir / SNAPSHOTS
        self.metrics = self.dir / METRICS
        self.checkpoints = self.dir / CHECKPOINTS
        self.train_log = self.dir / TRAIN_LOG
        self.summary = self.dir / SUMMARY
        self.stored = self.dir / STORED


@dataclass(frozen=True)
class Layout:
    """The artefacts under one outdir (as configured: `config.load` strips a trailing /)."""

    root: str

    @classmethod
    def of_run_dir(cls, run_dir: str | os.PathLike) -> Layout:
        """The layout a run directory lies in (`<outdir>/runs/<run_id>`)."""
        return cls(str(Path(run_dir).parents[1]))

    @classmethod
    def of_pack(cls, manifest: str | os.PathLike) -> Layout:
        """The layout a pack's manifest lies in (`<outdir>/packs/<pack_id>.json`)."""
        return cls(str(Path(manifest).parents[1]))

    # ---- runs, datasets, packs
    def run_dir(self, run_id: str) -> str:
        return f"{self.root}/runs/{run_id}"

    def run(self, run_id: str) -> RunPaths:
        return RunPaths(self.run_dir(run_id))

    def metrics(self, run_id: str) -> str:
        return f"{self.run_dir(run_id)}/{METRICS}"

    def checkpoints(self, run_id: str) -> str:
        return f"{self.run_dir(run_id)}/{CHECKPOINTS}"

    def summary(self, run_id: str) -> str:
        return f"{self.run_dir(run_id)}/{SUMMARY}"

    def dataset(self, dataset_id: str) -> str:
        return f"{self.root}/datasets/{dataset_id}.pt"

    def pack(self, pack_id: str) -> str:
        """A pack's manifest (written when the `train_pack` job ends)."""
        return f"{self.root}/packs/{pack_id}.json"

    def log(self, rule: str, name: str | None = None) -> str:
        """A job's log: `logs/<rule>/<name>.log`, or `logs/<rule>.log` for a rule with
        one job (a run trains in `train`'s log, or in its pack's, `train_pack`'s)."""
        return f"{self.root}/logs/{rule}/{name}.log" if name else f"{self.root}/logs/{rule}.log"

    # ---- diagnostics and tables
    def diagnostic(self, kind: str, run_id: str, suffix: str = "") -> str:
        """A per-run diagnostic table (`collective`, `routing`, `hessian`)."""
        return f"{self.root}/diagnostics/{kind}/{run_id}{suffix}.csv"

    def table(self, name: str) -> str:
        """An aggregated table: tau, metrics, fits, statistics, hypotheses, ..."""
        return f"{self.root}/{name}.csv"

    def figure(self, name: str, ext: str) -> str:
        return f"{self.root}/figures/{name}.{ext}"

    # ---- the paper's generated sources and PDF
    @property
    def tex_dir(self) -> str:
        return f"{self.root}/tex"

    @property
    def tex_numbers(self) -> str:
        return f"{self.tex_dir}/numbers.tex"

    def tex_table(self, name: str) -> str:
        return f"{self.tex_dir}/tables/{name}.tex"

    def tex_prose(self, name: str) -> str:
        """A generated paragraph of the report (mbc.paper.outcome): abstract, conclusion."""
        return f"{self.tex_dir}/text/{name}.tex"

    @property
    def paper_pdf(self) -> str:
        """Where an outdir's PDF goes by default (config `paper_pdf` for another outdir)."""
        return f"{self.root}/paper/main.pdf"

    # ---- the outdir's own state (not artefacts: caches, the lock, TensorBoard)
    @property
    def cache(self) -> Path:
        return Path(self.root) / ".mbc"

    @property
    def steps_per_s(self) -> Path:
        """The banner's measured steps/s, per shape."""
        return self.cache / "steps_per_s.json"

    @property
    def lock(self) -> Path:
        """Held by the invocation that may repair the outdir (mbc.workflow.integrity)."""
        return self.cache / "outdir.lock"

    @property
    def compile_cache(self) -> Path:
        """torch.compile's kernels, shared by every job of the outdir."""
        return self.cache / "torch_compile"

    def tensorboard(self, run_id: str) -> Path:
        return Path(self.root) / "tensorboard" / run_id


def can_be_a_directory(key: str, written: str) -> None:
    """Refuse, in one line naming config `key` and its value as written, a path that cannot
    be a directory of ours (the outdir, the run store): a dangling symlink or a loop, a file,
    or a path below a file. One that does not exist yet is fine: it is made when written."""
    path = Path(written)
    if path.is_symlink() and not path.exists():
        raise ConfigError(key, written, "is a symlink to nothing (dangling, or a loop)")
    for parent in [path, *path.parents]:
        if parent.exists() and not parent.is_dir():
            what = (
                "exists and is not a directory"
                if parent == path
                else f"lies below {parent}, which is not a directory"
            )
            raise ConfigError(key, written, what)


def canonical_outdir(written: str) -> str:
    """One outdir, one name, whatever spelling reached it (`./results/`, `results//`,
    `$PWD/results`): the normalised path, relative to the working directory where it lies
    inside it (Snakemake matches a target as written, and the README's targets are
    relative), else absolute. Locks, Snakemake's records and messages all see this name.
    A symlink keeps its own name (a target named through it must match the outputs; the
    outdir's lock resolves it, `mbc.workflow.outdir_hold`, and every table's sidecar binds it
    to what built it, so no record filed under the other name is trusted). A path that
    cannot be an outdir is refused in one line naming the key and the value as written."""
    can_be_a_directory("outdir", written)
    full = os.path.normpath(os.path.abspath(written))
    rel = os.path.relpath(full)
    return full if rel == ".." or rel.startswith(f"..{os.sep}") else rel
