"""The package functions that rule scripts call up to the aggregated tables (datasets,
training, a run's summary and diagnostics, the tables stacked): one per rule, typed
arguments, paths in/out. From the aggregated tables on (fits, verdicts, the paper):
`mbc.report_pipeline`.

Each function reads its inputs, calls the science modules and writes its outputs
atomically; a table derived from other files is written inside `built_from` them, so that
its sidecar names what it was built from (`mbc.workflow.integrity` compares). Nothing here
imports Snakemake.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from mbc.core.artifacts import (
    CorruptArtifactError,
    built_from,
    dumps_strict,
    read_csv_checked,
    read_json_checked,
    read_sidecar_sha256,
    torch_load_checked,
    torch_save_atomic,
    write_csv_atomic,
    write_json_atomic,
    write_sidecar_sha256,
)
from mbc.core.config_loader import Run
from mbc.core.journal import METRIC_COLUMNS, finished, logged_divergence, logged_tau, read_journal
from mbc.core.layout import RunPaths
from mbc.core.spec import RunSpec, TaskSpec, dataset_id, grid_rows
from mbc.diagnostics.collective import (
    collective_tables,
    group_accuracy,
    sample_groups,
)
from mbc.diagnostics.config_sections import (
    CollectiveDiagnostic,
    HessianDiagnostic,
    PlateauSensitivity,
    RoutingDiagnostic,
    Summary,
)
from mbc.diagnostics.hessian import checkpoint_estimates, checkpoint_rows
from mbc.diagnostics.hessian_table import HESSIAN_COLUMNS, READERS
from mbc.diagnostics.plateau_sensitivity import plateau_sensitivity
from mbc.diagnostics.routing import (
    ABLATION_COLUMNS,
    ATTENTION_COLUMNS,
    ROUTING_HEAD_COLUMNS,
    ablations,
    attention_to_z,
    top_head,
)
from mbc.diagnostics.summary import summarize_run, tau_table
from mbc.training import author_log
from mbc.training import train as trainer
from mbc.training.compile_cache import use_outdir_compile_cache
from mbc.training.data import STREAM_DIAG, Dataset, build_dataset, stream_seed
from mbc.training.metrics import fixed_contexts, make_eval_batch, training_loss
from mbc.training.record import finalize_run
from mbc.training.setup import pick_device
from mbc.training.snapshots import load_model, nearest, phase_steps, read_index
from mbc.workflow.job_log import console


def load_dataset(path) -> Dataset:
    """The dataset, its sha256 checked against the sidecar written with it (when present),
    and its identity: the task and seed it holds must give the id its file is named by
    (another dataset's file copied in with its own sidecar passes the checksum)."""
    state = torch_load_checked(path, sha256=read_sidecar_sha256(path))
    seed = state.pop("seed", None)  # absent in a file written before it was recorded
    want = Path(path).name.removesuffix(".pt")
    if seed is not None and (got := dataset_id(TaskSpec(**state["task"]), seed)) != want:
        raise CorruptArtifactError(f"{path}: holds dataset {got}, not {want}", path)
    return Dataset.from_state(state)


def make_dataset(task: TaskSpec, seed: int, out_path) -> None:
    """Only the task and the seed enter: every run sharing them shares this file, which
    records the seed (the task it records already). Its sha256 and its dataset id go to
    `<file>.sha256` beside it (checked by every reader and at start-up)."""
    ds = build_dataset(task, seed)
    digest = torch_save_atomic(out_path, {**ds.to_state(), "seed": seed})
    write_sidecar_sha256(out_path, digest, dataset_id(task, seed))
    print(f"dataset: D={ds.tokens.shape[0]} T={ds.tokens.shape[1]} seed={seed}")


def train(spec: RunSpec, dataset_path, run_dir, *, device: str = "auto", threads: int = 1) -> None:
    torch.set_num_threads(threads)
    if spec.train.compile:
        use_outdir_compile_cache(run_dir)
    dev = pick_device(device)
    print(f"training {spec.run_id} on {dev} ({threads} threads)")
    metrics = trainer.train_run(spec, load_dataset(dataset_path), run_dir, dev)
    last = metrics.iloc[-1]
    console(
        f"{spec.run_id}: done at step {int(last.step)}: L_cand={last.candidate_loss:.4f} "
        f"wall={last.wall_s:.1f}s"
    )


def train_pack(
    specs: list[RunSpec],
    dataset_paths: list,
    run_dirs: list,
    manifest_path,
    *,
    device: str = "auto",
    threads: int = 1,
) -> None:
    """Train the runs of one pack together (`mbc.training.train.train_pack`), each in its own
    directory; its tables are left to `unpack_run`, their rule (one writer per file). The
    manifest lists, per run, whether it trained here, its last step and tau."""
    torch.set_num_threads(threads)
    if specs[0].train.compile:
        use_outdir_compile_cache(run_dirs[0])
    dev = pick_device(device)
    print(f"training a pack of {len(specs)} runs on {dev} ({threads} threads)")
    loaded: dict[str, Dataset] = {}  # runs of one task and seed share a dataset
    for p in dataset_paths:
        loaded.setdefault(str(p), load_dataset(p))
    t0 = time.perf_counter()
    datasets = [loaded[str(p)] for p in dataset_paths]
    trained = trainer.train_pack(specs, datasets, run_dirs, dev, finalize=False)
    runs = []
    for spec, d, fresh in zip(specs, run_dirs, trained, strict=True):
        rows = read_journal(RunPaths(d).log)
        runs.append(
            {
                "run_id": spec.run_id,
                "trained": fresh,
                "steps": rows[-1]["step"],
                "tau": logged_tau(rows),
                "diverged_step": logged_divergence(rows),
            }
        )
    wall = time.perf_counter() - t0
    write_json_atomic(
        manifest_path, {"device": str(dev), "threads": threads, "wall_s": wall, "runs": runs}
    )
    console(
        f"pack {Path(manifest_path).stem}: done in {wall:.1f}s, {sum(trained)} of "
        f"{len(specs)} runs trained here (each run's steps: {manifest_path})"
    )


def unpack_run(spec: RunSpec, run_dir) -> None:
    """A packed run's metrics.csv and checkpoints.csv, from the log its pack wrote."""
    rows = read_journal(RunPaths(run_dir).log)
    if not finished(rows):
        step = next((r["step"] for r in reversed(rows) if "step" in r), 0)
        raise RuntimeError(
            f"{spec.run_id}: its pack has not finished it (its log ends at step {step}); "
            "the next `snakemake` run trains it again"
        )
    finalize_run(spec, run_dir)


def summarize(spec: RunSpec, metrics_path, out_path, diagnostics: Summary) -> None:
    """The run's summary.json. The author's logged lead reads train_log.csv beside
    metrics.csv (written with it by `finalize_run`); a run trained before that file
    existed has none, and its logged lead is reported as not measured."""
    metrics = read_csv_checked(metrics_path, required=METRIC_COLUMNS, min_rows=1)
    paths = RunPaths(Path(metrics_path).parent)
    log_path = paths.train_log
    if not log_path.exists() and paths.log.is_file():
        # a missing train_log.csv is no history: the run's log holds its windows
        author_log.write_from_log(paths.log, log_path)
    windows = read_csv_checked(log_path, required=author_log.COLUMNS) if log_path.exists() else None
    if windows is None:
        print(f"{spec.run_id}: no {author_log.FILE}: the author's logged lead is not measured")
    s = summarize_run(spec, metrics, diagnostics, windows)
    with built_from([metrics_path, *([log_path] if windows is not None else [])]):
        write_json_atomic(out_path, s)
    print(dumps_strict(s))


def make_tau_table(runs: list[Run], summary_paths: list, out_path) -> None:
    summaries = {}
    for p in summary_paths:
        s = read_json_checked(p, required=["run_id", "tau", "censored"])
        summaries[s["run_id"]] = s
    df = tau_table(runs, summaries)
    with built_from(summary_paths):
        write_csv_atomic(out_path, df)
    print(f"{len(df)} rows, {int(df.censored.sum())} censored, {int(df.diverged.sum())} diverged")


def make_plateau_sensitivity(
    cfg: PlateauSensitivity,
    diagnostics: Summary,
    tau_path,
    metrics_path,
    out_path,
    grid: dict | None = None,
):
    """results/plateau_sensitivity.csv: plateau height / log K under other window ends, from
    the grid rows the run summaries read (grid: run id -> its eval grid, `grid_rows`)."""
    tau = read_csv_checked(tau_path, required=["experiment", "run_id", "model", "k", "d", "seed"])
    metrics = read_csv_checked(
        metrics_path, required=["run_id", "step", "candidate_loss", "delta_z"]
    )
    metrics = grid_rows(metrics, grid or {})
    table = plateau_sensitivity(cfg, diagnostics, tau, metrics)
    with built_from([tau_path, metrics_path]):
        write_csv_atomic(out_path, table)
    summary = table.groupby("window_end", sort=False)["in_band"].agg(["sum", "size"])
    print(summary.rename(columns={"sum": "in_band", "size": "runs"}).to_string())


# ---- post-hoc diagnostics over saved snapshots (no retraining) --------------------------


@dataclass(frozen=True)
class _Snapshots:
    """One run's saved snapshots as every post-hoc diagnostic reads them: its dataset, the
    snapshot index, tau from its summary and the device; `write` records the three as what
    the tables were built from (the snapshots by their sha256, in the index)."""

    name: str  # the diagnostic's, for its log
    spec: RunSpec
    ds: Dataset
    index: pd.DataFrame
    tau: float | None
    dev: torch.device
    run_dir: Path
    inputs: list

    @classmethod
    def open(cls, name: str, spec: RunSpec, dataset_path, run_dir, summary_path, device: str):
        tau = read_json_checked(summary_path, required=["tau"])["tau"]
        return cls(
            name=name,
            spec=spec,
            ds=load_dataset(dataset_path),
            index=read_index(run_dir),
            tau=tau,
            dev=pick_device(device),
            run_dir=Path(run_dir),
            inputs=[dataset_path, RunPaths(run_dir).checkpoints, summary_path],
        )

    def phases(self, fractions) -> list[tuple[float, int]]:
        """(fraction of tau, the snapshot step nearest it); none for a censored run."""
        if self.tau is None:
            print(f"{self.spec.run_id}: censored (no tau), no {self.name} phases")
        return phase_steps(self.index, self.tau, fractions)

    def model(self, step: int):
        return load_model(self.spec, self.run_dir, self.index, step, self.dev)

    def write(self, tables: dict) -> None:
        """Each output path's table."""
        with built_from(self.inputs):
            for path, table in tables.items():
                write_csv_atomic(path, table)


def diagnose_collective(
    spec: RunSpec,
    dataset_path,
    run_dir,
    summary_path,
    cfg: CollectiveDiagnostic,
    out_groups,
    out_summary,
    device: str = "auto",
) -> None:
    run = _Snapshots.open("collective", spec, dataset_path, run_dir, summary_path, device)
    groups = sample_groups(run.ds, cfg.n_groups, spec.seed)
    per_step, fractions = {}, {}
    for f, step in run.phases(cfg.tau_fractions):
        per_step[step], fractions[step] = (
            group_accuracy(run.model(step), run.ds, groups, run.dev),
            f,
        )
    g, s = collective_tables(
        spec.run_id, spec.task.k, run.tau, per_step, fractions, groups, cfg.accurate
    )
    run.write({out_groups: g, out_summary: s})


def diagnose_routing(
    spec: RunSpec,
    dataset_path,
    run_dir,
    summary_path,
    cfg: RoutingDiagnostic,
    out_attention,
    out_ablation,
    device: str = "auto",
) -> None:
    run = _Snapshots.open("routing", spec, dataset_path, run_dir, summary_path, device)
    rng = np.random.default_rng(stream_seed(spec.seed, STREAM_DIAG))
    batch = make_eval_batch(run.ds, fixed_contexts(run.ds, cfg.n_contexts, rng), rng).to(run.dev)
    att, abl = [], []
    names = {float(v): k for k, v in cfg.phases}
    for f, step in run.phases([f for _, f in cfg.phases]):
        model = run.model(step)
        a = attention_to_z(model, batch)
        head = (spec.run_id, spec.task.k, run.tau, names[f], step)
        att += [
            (*head, la, h, float(a[la, h])) for la in range(a.shape[0]) for h in range(a.shape[1])
        ]
        abl += [(*head, *row) for row in ablations(model, batch)]
    run.write(
        {
            out_attention: pd.DataFrame(att, columns=ATTENTION_COLUMNS),
            out_ablation: pd.DataFrame(abl, columns=ABLATION_COLUMNS),
        }
    )


def diagnose_hessian(
    spec: RunSpec,
    dataset_path,
    run_dir,
    summary_path,
    cfg: HessianDiagnostic,
    out_path,
    device: str = "auto",
) -> None:
    run = _Snapshots.open("hessian", spec, dataset_path, run_dir, summary_path, device)
    rng = np.random.default_rng(stream_seed(spec.seed, STREAM_DIAG))
    n = run.ds.tokens.shape[0]
    sub = torch.as_tensor(np.sort(rng.choice(n, size=min(cfg.n_examples, n), replace=False)))
    tokens = run.ds.tokens[sub].to(run.dev)  # the training objective on a fixed subsample
    plateau = cfg.plateau_fraction
    fractions = sorted({*cfg.tau_fractions, plateau})
    plateau_step = None if run.tau is None else nearest(run.index, plateau * run.tau)
    rows = []
    for f, step in run.phases(fractions):
        model = run.model(step)
        params = [p for p in model.parameters() if p.requires_grad]
        estimates = checkpoint_estimates(
            lambda m=model: training_loss(m, tokens),
            params,
            cfg,
            seed=stream_seed(spec.seed, STREAM_DIAG),
        )
        phase = "plateau" if step == plateau_step else "other"
        rows += checkpoint_rows(spec.run_id, spec.task.k, run.tau, step, f, phase, estimates)
        print(
            f"step {step} ({f:g} tau): lambda_max, lambda_min by "
            + "; ".join(f"{m} {e.lambda_max:.4g} {e.lambda_min:.4g}" for m, e in estimates.items())
        )
    run.write({out_path: pd.DataFrame(rows, columns=HESSIAN_COLUMNS)})


def concat_tables(paths: list, out_path, table: str = "") -> None:
    """Stack per-run tidy tables (of `table`: `READERS`) into one (empty per-run tables
    contribute nothing)."""
    frames = [READERS.get(table, read_csv_checked)(p) for p in paths]
    frames = [f for f in frames if len(f.columns)]
    rows = [f for f in frames if not f.empty]
    if rows:
        df = pd.concat(rows, ignore_index=True)
    else:  # nothing measured (e.g. every diagnosed run censored): an empty table is data
        df = frames[0].iloc[:0] if frames else pd.DataFrame()
    with built_from(paths):
        write_csv_atomic(out_path, df)
    print(f"{out_path}: {len(df)} rows from {len(paths)} files")


def make_routing_heads(attention_path, ablation_path, out_path) -> None:
    """Per run, the head whose zero-ablation removes most of delta_z at tau
    (docs/method.md#routing-head)."""
    att, abl = read_csv_checked(attention_path), read_csv_checked(ablation_path)
    rows = []
    if not abl.empty:
        for run_id, a in abl.groupby("run_id"):
            heads = top_head(a, att[att.run_id == run_id] if not att.empty else att)
            rows.append({"run_id": run_id, "k": int(a.k.iloc[0]), "tau": a.tau.iloc[0], **heads})
    df = pd.DataFrame(rows, columns=ROUTING_HEAD_COLUMNS)
    with built_from([attention_path, ablation_path]):
        write_csv_atomic(out_path, df)
    print(df.to_string(index=False))
