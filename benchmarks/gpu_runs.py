"""Train a preset's listed runs on a lent device, and merge them into the preset's outdir.

    python benchmarks/gpu_runs.py plan  --preset paper --out PLAN [--slot-s 540] [--carry-mb 48]
    python benchmarks/gpu_runs.py train --preset paper_cpu --runs RUNS.txt --out DIR
                                        [--deadline-s 470] [--width 4] [--jobs 12]
                                        [--resume-from PREV] [--carry-mb 48]
    python benchmarks/gpu_runs.py merge --preset paper_cpu --from DIR [--outdir OUTDIR]

For a device machine that has torch but not Snakemake, and that returns only a few
megabytes (the device lease of README "Training on a GPU"). `train` trains each listed run
with its own spec, exactly as the workflow's `train_pack` job would (same `RunSpec`, same
dataset from `build_dataset(task, seed)`, same `RunRecord`: log, evaluations, early stop,
divergence stop), packed by shape (`pack_key`) into chunks of at most --width runs, the
chunks in parallel processes, longest budget first. At --deadline-s every unfinished run
stops. It writes DIR/gpu_runs.json (the device, each run's state, tau, steps and its
dataset's digest), DIR/runs.tar.gz: each run finished in this call, its log and tables,
not its snapshots (about 100 MB a run at paper size), and DIR/resume.tar.gz: each
unfinished run's log and last resume point (`state/log.jsonl`, `state/resume.pt`).
Each log's `start` event names the device (`device: cuda (...)`), so PROVENANCE counts
the runs trained there.

Short calls (`plan`): a later call given `--resume-from PREV` (the last call's DIR, or a
copy of its gpu_runs.json and resume.tar.gz) continues every unfinished run from its last
resume point (what it trained after it is trained again: at most eval.resume_every steps)
and skips the runs finished before. The resume state travels in the call's output, so
`train` keeps it within --carry-mb: a chunk starts only while the resume points of all the
runs in flight (weights and AdamW moments, `state_mb`) fit, runs carried in first. `plan`
writes the run list and the commands of each call and of the merge between calls.

`merge` (here, in the preset's outdir) takes every run that finished there and has not
finished here: it checks the run id against the config and the dataset's digest against the
outdir's dataset file (made here by the dataset rule's function when missing: the same
data, or the run is refused), moves any partial run
directory here aside to `<outdir>/superseded/` (nothing is lost), and unpacks the run's
files. The next `snakemake` rebuilds the run's tables from its log and summarises it;
nothing retrains. A run that a diagnostic reads needs its snapshots, which did not travel:
`merge` refuses it (train those here; `plan` leaves them out).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
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
# an unfinished run's state: what `RunRecord.resume` reads
RESUME_FILES = ("state/log.jsonl", "state/resume.pt")


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


def state_mb(spec) -> float:
    """MB of one run's resume point: fp32 weights and AdamW's two moments."""
    from mbc.planning.cost import n_parameters

    return 3 * 4 * n_parameters(spec) / 1e6


def _train_chunk(args) -> list[dict]:
    preset, overrides, ids, out, deadline_wall, device, stop_after = args
    from mbc.core.journal import finished, logged_divergence, logged_tau, read_journal
    from mbc.core.layout import RunPaths
    from mbc.training.data import build_dataset
    from mbc.training.record import finalize_run
    from mbc.training.train import train_pack

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
        train_pack(specs, datasets, dirs, dev, say=lambda m: print(tag, m, flush=True),
                   deadline=deadline, stop_after=stop_after, progress_every_s=60.0)  # fmt: skip
        error = None
    except Exception as exc:  # noqa: BLE001 - one chunk's failure keeps the others'
        error = f"{type(exc).__name__}: {exc}"
        print(tag, "FAILED", error, flush=True)
    wall = time.perf_counter() - t0
    rows = []
    for s, d, ds in zip(specs, dirs, datasets, strict=True):
        log = read_journal(RunPaths(d).log)
        if error is None and finished(log) and not (d / "metrics.csv").exists():
            finalize_run(s, d)  # finished in a pack the deadline stopped: its tables now
        evals = [x for x in log if "event" not in x]
        rows.append({
            "run_id": s.run_id, "finished": finished(log), "tau": logged_tau(log),
            "diverged_step": logged_divergence(log),
            "steps": evals[-1]["step"] if evals else 0, "budget": s.train.max_steps,
            "chunk_width": len(specs), "chunk_wall_s": round(wall, 1),
            "dataset_sha256": dataset_digest(ds), "error": error,
        })  # fmt: skip
    return rows


def _carried(prev: Path | None, work: Path, preset: str) -> tuple[list[str], dict[str, int]]:
    """Unpack a previous call's resume.tar.gz into `work` (each unfinished run's state):
    (the runs finished in that call or before it, {run id: its resume step})."""
    if prev is None:
        return [], {}
    if not (prev / "gpu_runs.json").is_file():
        raise SystemExit(f"gpu_runs: --resume-from {prev}: no gpu_runs.json there")
    summary = json.loads((prev / "gpu_runs.json").read_text())
    if summary["preset"] != preset:
        raise SystemExit(f"gpu_runs: --resume-from {prev}: a call of preset "
                         f"{summary['preset']}, not {preset}")  # fmt: skip
    done = sorted(set(summary.get("done_before", [])) | {
        r["run_id"] for r in summary["runs"] if r["finished"]})  # fmt: skip
    carried = {}
    if (prev / "resume.tar.gz").exists():
        with tarfile.open(prev / "resume.tar.gz") as tar:
            for m in tar.getmembers():
                if not m.isfile() or not m.name.startswith("runs/") or ".." in m.name:
                    raise SystemExit(f"gpu_runs: {prev / 'resume.tar.gz'}: unexpected {m.name}")
                dest = work / m.name
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(tar.extractfile(m).read())
                carried.setdefault(m.name.split("/")[1], 0)
    for r in summary["runs"]:
        if r["run_id"] in carried:
            carried[r["run_id"]] = r.get("resume_step", 0)
    return done, carried


def _resume_step(run_dir: Path) -> int:
    from mbc.core.journal import last_resume, read_journal

    log = read_journal(run_dir / "state" / "log.jsonl")
    i = last_resume(log)
    return 0 if i is None or not (run_dir / "state" / "resume.pt").exists() else log[i]["step"]


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
    prev = Path(a.resume_from) if a.resume_from else None
    done_before, carried = _carried(prev, work, a.preset)
    ids = [r for r in ids if r not in done_before]
    todo = chunks({r: cfg.specs[r] for r in ids}, a.width)
    # runs carried in continue first: their state must travel on either way
    todo.sort(key=lambda c: not any(r in carried for r in c))
    print(f"gpu_runs: {len(ids)} runs of {a.preset} to train ({len(done_before)} finished "
          f"before, {len(carried)} resumed) in {len(todo)} chunks of at most {a.width}, "
          f"{a.jobs} at a time, on {device_name(torch.device(device))}, torch "
          f"{torch.__version__}; deadline {a.deadline_s:.0f} s, resume state at most "
          f"{a.carry_mb:g} MB", flush=True)  # fmt: skip
    deadline_wall = t_start + a.deadline_s
    rows: list[dict] = []

    def save() -> tuple[int, int]:
        """runs.tar.gz, resume.tar.gz and gpu_runs.json as they stand: rewritten after every
        chunk, so a command killed at its limit still returns the runs finished by then."""
        done = [r for r in rows if r["finished"]]
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for r in done:
                d = work / "runs" / r["run_id"]
                for name in SMALL_FILES:
                    if (d / name).exists():
                        tar.add(d / name, arcname=f"runs/{r['run_id']}/{name}")
        finished_ids = {r["run_id"] for r in done}
        state = io.BytesIO()
        with tarfile.open(fileobj=state, mode="w:gz") as tar:
            for rid in ids:  # unfinished, trained here or carried in and not started
                d = work / "runs" / rid
                if rid not in finished_ids and _resume_step(d) > 0:
                    for name in RESUME_FILES:
                        tar.add(d / name, arcname=f"runs/{rid}/{name}")
        trained = {r["run_id"] for r in rows}
        waiting = [{"run_id": rid, "finished": False, "steps": 0, "waiting": True,
                    "resume_step": _resume_step(work / "runs" / rid)}
                   for rid in ids if rid not in trained]  # fmt: skip
        summary = {
            "preset": a.preset, "overrides": overrides,
            "device": device_name(torch.device(device)), "torch": torch.__version__,
            **code_version(),
            "wall_s": round(time.time() - t_start, 1),
            "done_before": done_before,
            "runs": sorted(rows + waiting, key=lambda r: r["run_id"]),
        }  # fmt: skip
        write_bytes_atomic(out / "runs.tar.gz", buf.getvalue())
        write_bytes_atomic(out / "resume.tar.gz", state.getvalue())
        write_bytes_atomic(out / "gpu_runs.json", json.dumps(summary, indent=1).encode())
        return len(done), len(state.getvalue())

    def report(chunk_rows: list[dict]) -> None:
        for r in chunk_rows:
            r["resume_step"] = 0 if r["finished"] else _resume_step(work / "runs" / r["run_id"])
            state = "finished" if r["finished"] else "stopped"
            print(f"  {state:>8} {r['run_id']}: tau {r['tau']}, {r['steps']:,} of "
                  f"{r['budget']:,} steps ({r['chunk_wall_s']} s)", flush=True)  # fmt: skip
        rows.extend(chunk_rows)
        save()

    # a chunk starts while the resume points of every run in flight fit in --carry-mb:
    # whatever the deadline stops, its state comes back
    mb = {r: state_mb(cfg.specs[r]) for r in ids}
    with mp.get_context("spawn").Pool(max(1, min(a.jobs, len(todo)))) as pool:
        running: dict = {}  # AsyncResult -> the chunk's MB in flight
        queue = list(todo)
        while queue or running:
            while queue and len(running) < a.jobs and time.time() < deadline_wall:
                need = sum(mb[r] for r in queue[0])
                if running and sum(running.values()) + need > a.carry_mb:
                    break
                if need > a.carry_mb:  # alone, or never: it runs, and may return more
                    print(f"gpu_runs: WARNING: a chunk's resume state ({need:.1f} MB) exceeds "
                          f"--carry-mb {a.carry_mb:g}; lower --width", flush=True)  # fmt: skip
                c = queue.pop(0)
                job = (a.preset, overrides, c, str(work), deadline_wall, device, a.stop_after)
                running[pool.apply_async(_train_chunk, (job,))] = need
            if not running:
                break  # the deadline: the rest wait for the next call
            ready = [j for j in running if j.ready()]
            for j in ready:
                del running[j]
                report(j.get())
            if not ready:
                time.sleep(0.2)
    n_done, size = save()
    steps = sum(r["steps"] for r in rows)
    left = len(ids) - n_done
    print(f"gpu_runs: {n_done} of {len(ids)} runs finished, {steps:,} run-steps in "
          f"{time.time() - t_start:.0f} s; runs.tar.gz {(out / 'runs.tar.gz').stat().st_size / 1e6:.1f}"
          f" MB; {left} to train in a later call (resume.tar.gz {size / 1e6:.1f} MB)")  # fmt: skip
    return 0


def plan(a) -> int:
    """Write PLAN/runs.txt (the preset's runs no diagnostic reads: their snapshots do not
    travel) and PLAN/calls.md (the command of every call, the merge and the carry between
    calls), sized so one call's resume state stays within --carry-mb; with --rates and
    --tau-coef, the expected number of calls (the estimate's model, `mbc.planning`)."""
    from mbc.core.artifacts import write_text_atomic
    from mbc.core.packing import pack_key

    cfg = load(a.preset)
    diag = {r for k in ("collective", "routing", "hessian") for r in cfg.diagnosed_runs(k)}
    ids = [r for r in cfg.specs if r not in diag]
    per_run = max(state_mb(cfg.specs[r]) for r in ids)
    in_flight = max(1, int(a.carry_mb // per_run))
    width = min(in_flight, a.width)
    jobs = max(1, in_flight // width)
    deadline = a.slot_s - a.margin_s
    if deadline <= 0:
        raise SystemExit(f"gpu_runs plan: --slot-s {a.slot_s:g} leaves no time after "
                         f"--margin-s {a.margin_s:g}")  # fmt: skip
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "runs.txt", "\n".join(ids) + "\n")
    carry = a.carry_dir
    train_cmd = (f"python benchmarks/gpu_runs.py train --preset {a.preset} --runs {out}/runs.txt "
                 f"--deadline-s {deadline:g} --width {width} --jobs {jobs} "
                 f"--carry-mb {a.carry_mb:g} --out \"$OUT\"")  # fmt: skip
    lines = [
        f"# {a.preset} on a device in calls of at most {a.slot_s:g} s",
        "",
        f"{len(ids)} runs ({len(diag)} that a diagnostic reads train here, with the workflow). "
        f"A run's resume point is {per_run:.1f} MB, so at most {in_flight} runs are in flight "
        f"({jobs} chunk(s) of {width}) and a call returns at most {a.carry_mb:g} MB of state.",
        "",
        "First call (on the device, from the repository root):",
        "", f"    {train_cmd}", "",
        f"Every later call: the same, carrying `{carry}` and adding `--resume-from {carry}`.",
        "", f"    {train_cmd} --resume-from {carry}", "",
        "Here, after each call (FILES: the folder its files came back to):", "",
        f"    python benchmarks/gpu_runs.py merge --preset {a.preset} --from FILES",
        f"    rm -rf {carry} && mkdir -p {carry} && cp FILES/gpu_runs.json FILES/resume.tar.gz "
        f"{carry}/",
        "",
        "until a call prints `0 to train in a later call`.",
    ]  # fmt: skip
    if a.rates and a.tau_coef:
        from mbc.planning.cost import expected, measured_taus, n_evaluations
        from mbc.planning.timing import pack_seconds

        rates = json.loads(Path(a.rates).read_text())
        specs = {r: cfg.specs[r] for r in ids}
        exp = expected(specs, measured_taus(cfg.outdir, specs), a.tau_coef)
        secs = 0.0
        for c in chunks(specs, width):
            cs = [specs[r] for r in c]
            if pack_key(cs[0]) is None:
                continue
            st = [exp[r].steps for r in c]
            ev = [n_evaluations(specs[r], exp[r].steps, exp[r].tau) for r in c]
            secs += pack_seconds(cs, st, ev, rates, batched=rates["device"] != "cpu")
        n_calls = math.ceil(secs / jobs / deadline)
        lines += [
            "",
            f"Estimated (rates {a.rates}, tau = {a.tau_coef:g} D^1.2, the estimate's model): "
            f"{secs / 60:.0f} min of chunk time, {jobs} chunk(s) at a time: about {n_calls} "
            f"calls, plus what each call trains again after its stop (up to eval.resume_every "
            f"steps a run).",
        ]  # fmt: skip
    write_text_atomic(out / "calls.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def merge(a) -> int:
    from mbc.core.artifacts import write_bytes_atomic
    from mbc.core.journal import finished, read_journal
    from mbc.core.layout import Layout
    from mbc.runs_pipeline import load_dataset, make_dataset

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
            if finished(read_journal(layout.run(rid).log)):
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


def parser() -> argparse.ArgumentParser:
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
    t.add_argument(
        "--resume-from",
        default=None,
        help="the last call's output: its gpu_runs.json and resume.tar.gz",
    )
    t.add_argument(
        "--carry-mb",
        type=float,
        default=48.0,
        help="the most resume state one call returns (runs in flight x state_mb)",
    )
    t.add_argument("--stop-after", type=int, default=None,
                   help="testing: each chunk stops after this many pack steps")  # fmt: skip
    pl = sub.add_parser("plan")
    pl.add_argument("--preset", required=True)
    pl.add_argument("--out", required=True, help="the plan's folder: runs.txt, calls.md")
    pl.add_argument("--slot-s", type=float, default=540.0, help="one call's time limit")
    pl.add_argument("--margin-s", type=float, default=70.0,
                    help="of each slot, for start-up and the return")  # fmt: skip
    pl.add_argument("--carry-mb", type=float, default=48.0)
    pl.add_argument("--width", type=int, default=64, help="the widest chunk")
    pl.add_argument("--carry-dir", default=".gpu_carry",
                    help="where the last call's state waits here (git-ignored)")  # fmt: skip
    pl.add_argument("--rates", default=None, help="a device's rates: estimate the calls")
    pl.add_argument("--tau-coef", type=float, default=None)
    m = sub.add_parser("merge")
    m.add_argument("--preset", required=True)
    m.add_argument("--from", required=True, help="the folder holding gpu_runs.json")
    m.add_argument("--outdir", default=None)
    return ap


def main(argv=None) -> int:
    a = parser().parse_args(argv)
    return {"train": train, "plan": plan, "merge": merge}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
