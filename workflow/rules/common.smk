# Shared helpers: the validated config, run lookup and output paths.
import math
import os
import re
import sys

from pathlib import Path

import mbc.planning.cost
import mbc.planning.deadline
import mbc.core.arithmetic
import mbc.core.artifacts
import mbc.core.built_by
import mbc.config
import mbc.core.layout
import mbc.core.packing
import mbc.core.frozen
import mbc.core.spec
import mbc.training.tensorboard_log

# Validate once at start-up (JSON schema + semantic checks); a bad value stops the
# workflow here, before any job runs, with one line naming the key and the value.
# A file named on the command line under a preset's outdir selects that preset (no
# `--config preset=...` needed to rebuild one figure). Snakemake's targets are not known
# while the Snakefile is parsed, so they are read off the command line.
_OVERRIDES = dict(workflow.config_settings.overwrite_config or {})
if _preset := mbc.config.preset_of_targets(
    config, _OVERRIDES, mbc.config.command_line_targets(sys.argv)
):
    _OVERRIDES["preset"] = _preset
    if not (workflow.remote_exec or workflow.subprocess_exec):
        print(
            f"mbc: preset {_preset}: the outdir of the file(s) named on the command line",
            file=sys.stderr,
        )
try:
    # Snakemake's YAML keeps the last of a key given twice without a word: read each
    # configfile again, strictly, so that a duplicate key stops here in one line
    for _file in ("config.yaml", *workflow.config_settings.configfiles):
        mbc.config.read_yaml(_file)
    CFG = mbc.config.load(config, overrides=_OVERRIDES)
    # CUDA asked for where this process runs the jobs itself (a cluster's login node may
    # have no GPU: there the job on the GPU node decides)
    if (
        str(CFG.raw["device"]).startswith("cuda")
        and workflow.local_exec
        and not workflow.remote_exec
    ):
        import torch

        if not torch.cuda.is_available():
            raise mbc.config.ConfigError(
                "device", CFG.raw["device"], "CUDA is not available on this machine"
            )
    # --config deadline=2h30m: start only the runs that end in time (startup.smk)
    DEADLINE_S = mbc.planning.deadline.parse_deadline(CFG.raw.get("deadline"))
except (mbc.config.ConfigError, mbc.config.ConfigFileError) as exc:
    sys.exit(f"mbc: {exc}")
OUT = CFG.outdir
# what `auto` resolved to here goes to every job (a cluster node of another make included),
# so that all of them build the same run ids (mbc.core.arithmetic)
if CFG.arithmetic is not None:
    os.environ[mbc.core.arithmetic.ENV] = CFG.arithmetic.to_env()
L = mbc.core.layout.Layout(OUT)  # every path under the outdir
# tensorboard: reaches the training jobs through their environment, not as a rule
# parameter (a changed parameter retrains; the scalars change no number)
os.environ[mbc.training.tensorboard_log.ENV] = (
    "1" if CFG.raw.get("tensorboard") else "0"
)
SPECS = CFG.specs  # run_id -> RunSpec
MAIN_PROCESS = not (workflow.remote_exec or workflow.subprocess_exec)

DATASETS = {s.dataset_id: s for s in SPECS.values()}  # dataset_id -> a spec using it

# pack.enabled: pack id -> its run ids (rules in train.smk)
PACKS = mbc.core.packing.configured_packs(SPECS, CFG.raw["pack"])
PACK_OF = mbc.core.packing.pack_of(PACKS)


def gpu_mem_mb(run_ids):
    """A training job's estimated device memory (`mbc.planning.cost.pack_memory_gb`): its
    resource `gpu_mem_mb`, so `--resources gpu_mem_mb=<the GPU's MiB>` runs packs side by
    side while they fit (docs/gpu-and-slurm.md)."""
    return math.ceil(
        1024 * mbc.planning.cost.pack_memory_gb([SPECS[r] for r in run_ids])
    )


def one_of(ids):
    """A wildcard constraint matching exactly these run ids (none: matches nothing)."""
    return "|".join(re.escape(i) for i in ids) or "(?!)"


wildcard_constraints:
    run_id="[A-Za-z0-9_.+-]+",
    dataset_id="[A-Za-z0-9_.+-]+",


def all_run_ids():
    return list(SPECS)


# A rule hands its script the typed config sections it reads (mbc.config.sections) and,
# beside them, their content id: Snakemake's rerun record keeps builtin params only, so
# the id is what reruns a job when one of its sections changes.
# the ids by rule name (CFG.config_ids), one place for the rules, sidecars and run store
CONFIG_ID = CFG.config_ids()
DIAG = CFG.diagnostics


# Per-run diagnostic tables: aggregated name -> (diagnostic, file suffix)
DIAG_TABLES = {
    f"{kind}{sfx}": (kind, sfx)
    for kind, suffixes in mbc.core.layout.DIAGNOSTIC_FILES.items()
    for sfx in suffixes
}
DIAGNOSED = {
    kind: CFG.diagnosed_runs(kind) for kind in {k for k, _ in DIAG_TABLES.values()}
}
# run id -> the train job's priority: under a deadline the shortest run first (startup.smk)
TRAIN_PRIORITY = {}
# run id -> its diagnostic tables
RUN_DIAGNOSTICS = {
    r: [
        L.diagnostic(kind, r, sfx)
        for kind, sfx in DIAG_TABLES.values()
        if r in DIAGNOSED[kind]
    ]
    for r in SPECS
}
# Aggregated tidy tables: name -> the per-run files stacked into {OUT}/<name>.csv
TABLES = {
    "metrics": [L.metrics(r) for r in SPECS],
    **{
        name: [L.diagnostic(kind, r, sfx) for r in DIAGNOSED[kind]]
        for name, (kind, sfx) in DIAG_TABLES.items()
    },
}


def run_inputs(wc):
    """What a per-run diagnostic reads: dataset, snapshot index, tau (summary)."""
    spec = SPECS[wc.run_id]
    return {
        "dataset": L.dataset(spec.dataset_id),
        "checkpoints": L.checkpoints(wc.run_id),
        "summary": L.summary(wc.run_id),
    }


ALL_TARGETS = [
    L.table("tau"),
    *(L.table(t) for t in TABLES),
    L.table("fits"),
    L.table("threshold_sensitivity"),
    L.table("plateau_sensitivity"),
]


# Figures: name -> tables it reads (mbc.paper.figures registers one function per figure).
# (mbc.paper.figure_tables, not mbc.paper.figures: no matplotlib at every job's start-up)
from mbc.paper.figure_tables import FIGURE_TABLES as TABLES_NEEDED

FIGURES = list(TABLES_NEEDED)
# each figure's files: the drawing, its PNG, and its caption for what it drew (the report's)
FIGURE_FILES = ("pdf", "png", "tex")
import shutil

PAPER_PDF = CFG.raw["paper_pdf"]
# the paper's generated sources (the tex rule's outputs, by name): each one is a target, so that
# one the start-up moved aside (edited, cut) is rebuilt, and the PDF after it
TEX_OUTPUTS = {
    "numbers": L.tex_numbers,
    **{
        t: L.tex_table(t)
        for t in (
            "fits",
            "hypotheses",
            "scorecard",
            "init_scale",
            "init_comparison",
            "robustness",
            "definitions",
            "experiments",
        )
    },
    **{t: L.tex_prose(t) for t in ("abstract", "explanations", "conclusion")},
}
ALL_TARGETS += [
    L.table("routing_heads"),
    L.table("statistics"),
    L.table("hypotheses"),
    L.table("scorecard"),
    *(L.table(t) for t in ("init_scale", "init_comparison", "robustness")),
    *(L.figure(f, ext) for f in FIGURES for ext in FIGURE_FILES),
    *TEX_OUTPUTS.values(),
]
# The PDF needs a TeX toolchain (setup.sh installs it on Debian); without one the
# workflow builds everything else and says so.
if shutil.which("latexmk"):
    ALL_TARGETS.append(PAPER_PDF)
else:
    print("mbc: latexmk not found, the paper PDF is skipped (see paper/README_TEX.md)")
