"""The package functions that rule scripts call: one per rule, typed arguments, paths in/out.

Each function reads its inputs, calls the science modules and writes its outputs
atomically. Nothing here imports Snakemake.
"""

from __future__ import annotations

import json

import torch

from mbc.config import Run
from mbc.data import Dataset, build_dataset
from mbc.io import (
    read_csv_checked,
    read_json_checked,
    torch_load_checked,
    torch_save_atomic,
    write_csv_atomic,
    write_json_atomic,
)
from mbc.spec import RunSpec
from mbc.summary import summarize_run, tau_table
from mbc.train import METRIC_COLUMNS, pick_device, train_run


def load_dataset(path) -> Dataset:
    return Dataset.from_state(torch_load_checked(path))


def make_dataset(spec: RunSpec, out_path) -> None:
    ds = build_dataset(spec.task, spec.seed)
    torch_save_atomic(out_path, ds.to_state())
    print(f"dataset {spec.dataset_id}: D={ds.tokens.shape[0]} T={ds.tokens.shape[1]}")


def train(spec: RunSpec, dataset_path, run_dir, *, device: str = "auto", threads: int = 1) -> None:
    torch.set_num_threads(threads)
    dev = pick_device(device)
    print(f"training {spec.run_id} on {dev} ({threads} threads)")
    metrics = train_run(spec, load_dataset(dataset_path), run_dir, dev)
    last = metrics.iloc[-1]
    print(
        f"done at step {int(last.step)}: L_cand={last.candidate_loss:.4f} wall={last.wall_s:.1f}s"
    )


def summarize(spec: RunSpec, metrics_path, out_path, diagnostics: dict) -> None:
    metrics = read_csv_checked(metrics_path, required=METRIC_COLUMNS, min_rows=1)
    s = summarize_run(spec, metrics, diagnostics)
    write_json_atomic(out_path, s)
    print(json.dumps(s))


def make_tau_table(runs: list[Run], summary_paths: list, out_path) -> None:
    summaries = {}
    for p in summary_paths:
        s = read_json_checked(p, required=["run_id", "tau", "censored"])
        summaries[s["run_id"]] = s
    df = tau_table(runs, summaries)
    write_csv_atomic(out_path, df)
    print(f"{len(df)} rows, {int(df.censored.sum())} censored")
