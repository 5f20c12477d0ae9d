"""Train a preset's listed runs on a lent device, and merge them into the preset's outdir.

    python benchmarks/gpu_runs.py train --preset paper_cpu --runs RUNS.txt --out DIR
                                        [--deadline-s 470] [--width 4] [--jobs 12]
    python benchmarks/gpu_runs.py merge --preset paper_cpu --from DIR [--outdir OUTDIR]

For a device machine that has torch but not Snakemake, and that returns only a few
megabytes (the device lease of README "Training on a GPU"). `train` trains each listed run
with its own spec, exactly as the workflow's `train_pack` job would (same `RunSpec`, same
dataset from `build_dataset(task, seed)`, same `RunRecord`: log, evaluations, early stop,
divergence stop), packed by shape (`pack_key`) into chunks of at most --width runs, the
chunks in parallel processes, longest budget first. At --deadline-s every unfinished run
stops (it stays for the workflow). It writes DIR/gpu_runs.json (the device, each run's
state, tau, steps and its dataset's digest) and DIR/runs.tar.gz: each finished run's log
and tables, not its snapshots (about 100 MB a run at paper size). Each log's `start` event
names the device (`device: cuda (...)`), so PROVENANCE counts the runs trained there.

`merge` (here, in the preset's outdir) takes every run that finished there and has not
finished here: it checks the run id against the config and the dataset's digest against the
outdir's dataset file (made here by the dataset rule's function when missing: the same
data, or the run is refused), moves any partial run
directory here aside to `<outdir>/superseded/` (nothing is lost), and unpacks the run's
files. The next `snakemake` rebuilds the run's tables from its log and summarises it;
nothing retrains. A run that a diagnostic reads needs its snapshots, which did not travel:
`merge` refuses it (train those here).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import multiprocessing as mp
import os
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
# each table with its sidecar: a run's table without one beside its siblings' is unverified
SMALL_FILES = ("metrics.csv", "metrics.csv.sha256", "checkpoints.csv", "checkpoints.csv.sha256",
               "train_log.csv", "train_log.csv.sha256", "state/log.jsonl")  # fmt: skip


def load(preset: str, overrides: dict | None = None):
    from mbc import config as mbc_config

    raw = mbc_config.read_yaml(REPO / "config.yaml")
    return mbc_config.load(raw, {"preset": preset, **(overrides or {})})


def dataset_digest(ds) -> str:
    """sha256 of the dataset's tensors, field by field: equal here and there, or not the
    same data."""
    h = hashlib.sha256()
    for name, value in sorted(ds.to_state().items()):
        if name != "task":
            h.update(name.encode())
            h.update(value.contiguous().numpy().tobytes())
    return h.hexdigest()


def chunks(specs: dict, width: int) -> list[list[str]]:
    """The workflow's packs (`make_packs`) of `width` runs, cut from the runs in order of
    budget, longest first, and each unpackable run alone; the chunks longest first, so the
    long ones start at once."""
    from mbc.core.packing import make_packs, pack_key

    budget = {r: s.train.max_steps for r, s in specs.items()}
    ordered = {r: specs[r] for r in sorted(specs, key=lambda r: -budget[r])}
    out = list(make_packs(ordered, width).values())
    out += [[r] for r, s in ordered.items() if pack_key(s) is None]
    return sorted(out, key=lambda c: -max(budget[r] for r in c))


def _train_chunk(args) -> list[dict]:
    preset, overrides, ids, out, deadline_wall, device = args
    from mbc.core.layout import RunPaths
    from mbc.core.runlog import finished, logged_divergence, logged_tau, read_log
    from mbc.training.data import build_dataset
    from mbc.training.packed_train import train_pack
    from mbc.training.train import train_run

    torch.set_num_threads(1)
    cfg = load(preset, overrides)
    specs = [cfg.specs[r] for r in ids]
    dev = torch.device(device)
    datasets = [build_dataset(s.task, s.seed) for s in specs]
    dirs = [Path(out) / "runs" / r for r in ids]
    deadline = time.monotonic() + (deadline_wall - time.time())
    t0 = time.perf_counter()
    tag = f"[{ids[0][:40]}.. x{len(ids)}]"
    try:
        if len(specs) == 1 and specs[0].model.kind != "transformer":
            train_run(specs[0], datasets[0], dirs[0], dev, say=lambda m: None)
        else:
            train_pack(specs, datasets, dirs, dev, say=lambda m: print(tag, m, flush=True),
                       deadline=deadline, progress_every_s=60.0)  # fmt: skip
        error = None
    except Exception as exc:  # noqa: BLE001 - one chunk's failure keeps the others'
        error = f"{type(exc).__name__}: {exc}"
        print(tag, "FAILED", error, flush=True)
    wall = time.perf_counter() - t0
    rows = []
    for s, d, ds in zip(specs, dirs, datasets, strict=True):
        log = read_log(RunPaths(d).log)
        evals = [x for x in log if "event" not in x]
        rows.append({
            "run_id": s.run_id, "finished": finished(log), "tau": logged_tau(log),
            "diverged_step": logged_divergence(log),
            "steps": evals[-1]["step"] if evals else 0, "budget": s.train.max_steps,
            "chunk_width": len(specs), "chunk_wall_s": round(wall, 1),
            "dataset_sha256": dataset_digest(ds), "error": error,
        })  # fmt: skip
    return rows


def train(a) -> int:
    from mbc.core.artifacts import write_bytes_atomic
    from mbc.core.provenance import code_version, device_name

    t_start = time.time()
    overrides = json.loads(a.config) if a.config else {}
    cfg = load(a.preset, overrides)
    ids = [r for r in Path(a.runs).read_text().split() if r]
    unknown = [r for r in ids if r not in cfg.specs]
    if unknown:
        raise SystemExit(f"gpu_runs: {a.runs}: {len(unknown)} run ids not in preset "
                         f"{a.preset}, e.g. {unknown[0]}")  # fmt: skip
    device = "cuda" if torch.cuda.is_available() else "cpu"
    out, work = Path(a.out), Path(a.work or tempfile.mkdtemp(prefix="gpu_runs-"))
    out.mkdir(parents=True, exist_ok=True)
    todo = chunks({r: cfg.specs[r] for r in ids}, a.width)
    print(f"gpu_runs: {len(ids)} runs of {a.preset} in {len(todo)} chunks of at most "
          f"{a.width}, {a.jobs} at a time, on {device_name(torch.device(device))}, "
          f"torch {torch.__version__}; deadline {a.deadline_s:.0f} s", flush=True)  # fmt: skip
    deadline_wall = t_start + a.deadline_s
    jobs = [(a.preset, overrides, c, str(work), deadline_wall, device) for c in todo]
    rows: list[dict] = []

    def save() -> tuple[int, int]:
        """runs.tar.gz and gpu_runs.json as they stand: rewritten after every chunk, so a
        command killed at its limit still returns the runs finished by then."""
        done = [r for r in rows if r["finished"]]
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for r in done:
                d = work / "runs" / r["run_id"]
                for name in SMALL_FILES:
                    if (d / name).exists():
                        tar.add(d / name, arcname=f"runs/{r['run_id']}/{name}")
        summary = {
            "preset": a.preset, "overrides": overrides,
            "device": device_name(torch.device(device)), "torch": torch.__version__,
            **code_version(),
            "wall_s": round(time.time() - t_start, 1),
            "runs": sorted(rows, key=lambda r: r["run_id"]),
        }  # fmt: skip
        write_bytes_atomic(out / "runs.tar.gz", buf.getvalue())
        write_bytes_atomic(out / "gpu_runs.json", json.dumps(summary, indent=1).encode())
        return len(done), len(buf.getvalue())

    with mp.get_context("spawn").Pool(a.jobs) as pool:
        for chunk_rows in pool.imap_unordered(_train_chunk, jobs):
            rows += chunk_rows
            for r in chunk_rows:
                state = "finished" if r["finished"] else "stopped"
                print(f"  {state:>8} {r['run_id']}: tau {r['tau']}, {r['steps']:,} of "
                      f"{r['budget']:,} steps ({r['chunk_wall_s']} s)", flush=True)  # fmt: skip
            save()
    n_done, size = save()
    steps = sum(r["steps"] for r in rows)
    print(f"gpu_runs: {n_done} of {len(rows)} runs finished, {steps:,} run-steps in "
          f"{time.time() - t_start:.0f} s; runs.tar.gz {size / 1e6:.1f} MB")  # fmt: skip
    return 0


def merge(a) -> int:
    from mbc.core.artifacts import write_bytes_atomic
    from mbc.core.layout import Layout
    from mbc.core.runlog import finished, read_log
    from mbc.pipeline import load_dataset, make_dataset

    src = Path(getattr(a, "from"))
    summary = json.loads((src / "gpu_runs.json").read_text())
    overrides = {**summary["overrides"], **({"outdir": a.outdir} if a.outdir else {})}
    cfg = load(a.preset, overrides)
    layout = Layout(cfg.outdir)
    # the per-run diagnostics of workflow/rules/diagnostics.smk
    diag_sources = {
        r for kind in ("collective", "routing", "hessian") for r in cfg.diagnosed_runs(kind)
    }
    stamp = time.strftime("%Y%m%dT%H%M%S")
    taken, kept, refused = [], [], []
    with tarfile.open(src / "runs.tar.gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
        for r in summary["runs"]:
            rid = r["run_id"]
            if not r["finished"]:
                continue
            spec = cfg.specs.get(rid)
            if spec is None:
                refused.append((rid, "not a run of this config"))
                continue
            if rid in diag_sources:
                refused.append((rid, "a diagnostic reads its snapshots, which did not travel"))
                continue
            here = Path(layout.run(rid).dir)
            if finished(read_log(layout.run(rid).log)):
                kept.append(rid)
                continue
            ds_path = Path(layout.dataset(spec.dataset_id))
            if not ds_path.exists():  # as the workflow's dataset rule makes it
                make_dataset(spec.task, spec.seed, ds_path)
            if dataset_digest(load_dataset(ds_path)) != r["dataset_sha256"]:
                refused.append((rid, f"its dataset there differs from {ds_path}"))
                continue
            if here.exists():
                aside = Path(cfg.outdir) / "superseded" / f"{rid}-{stamp}"
                aside.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(here), str(aside))
            for name in SMALL_FILES:
                m = members.get(f"runs/{rid}/{name}")
                if m is not None:
                    write_bytes_atomic(here / name, tar.extractfile(m).read())
            taken.append(rid)
    print(f"gpu_runs merge: {len(taken)} runs taken from {src} ({summary['device']}), "
          f"{len(kept)} already finished here (kept), {len(refused)} refused")  # fmt: skip
    for rid, why in refused:
        print(f"  refused {rid}: {why}")
    return 1 if refused else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--preset", required=True)
    t.add_argument("--config", default=None, help="config overrides as JSON")
    t.add_argument("--runs", required=True, help="a file of run ids")
    t.add_argument("--out", default=os.environ.get("OUT"), help="gpu_runs.json, runs.tar.gz")
    t.add_argument("--work", default=None, help="where the runs train (default: a temp dir)")
    t.add_argument("--deadline-s", type=float, default=470.0)
    t.add_argument("--width", type=int, default=4)
    t.add_argument("--jobs", type=int, default=12)
    m = sub.add_parser("merge")
    m.add_argument("--preset", required=True)
    m.add_argument("--from", required=True, help="the folder holding gpu_runs.json")
    m.add_argument("--outdir", default=None)
    a = ap.parse_args(argv)
    return train(a) if a.cmd == "train" else merge(a)


if __name__ == "__main__":
    sys.exit(main())
