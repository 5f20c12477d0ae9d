"""The evaluation's share of a `paper_cpu` run's time, measured on the trainer itself.

    python benchmarks/eval_share.py [--experiment E1] [--k 20] [--steps 1000] [--json PATH]

Trains one run of the preset (its own spec, dataset and trainer, `mbc.training.train.train_run`,
fp32 on the CPU, one thread) for --steps steps into a temporary directory, with a timer around
every piece of work the run's record asks of it between training steps
(`mbc.training.pack_view.PackView`): the fixed evaluation (`evaluate`: every eval.every steps,
the log-spaced start, and the kept weights around a crossing), the author's sampled evaluation
(`evaluate_sampled`, every eval.dense_every steps where eval.sampled_groups is on), the
training-log windows' z-shuffled first-target losses (`train_shuffled_first_loss`,
`train_batch_shuffled_first_loss`, every dense_every steps) and the weights kept for the dense
evaluation (`keep`). It prints each one's seconds and share of the run's wall time, the whole
evaluation's share, and the training step's time per step. Ratios are measured in one process
on one run; say which CPU with them (the header prints it).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from mbc import config as mbc_config  # noqa: E402
from mbc.core.provenance import cpu_model  # noqa: E402
from mbc.training import pack_view  # noqa: E402
from mbc.training.data import build_dataset  # noqa: E402
from mbc.training.train import train_run  # noqa: E402

TIMED = (
    "evaluate",
    "evaluate_sampled",
    "train_shuffled_first_loss",
    "train_batch_shuffled_first_loss",
    "keep",
)


def timed_views(seconds: dict[str, float], calls: dict[str, int]) -> None:
    """Wrap each evaluation method of PackView with a timer (this process only)."""
    for name in TIMED:
        original = getattr(pack_view.PackView, name)

        def wrapper(self, *args, _f=original, _name=name, **kwargs):
            t0 = time.perf_counter()
            try:
                return _f(self, *args, **kwargs)
            finally:
                seconds[_name] += time.perf_counter() - t0
                # evaluations, not calls: the kept weights around a crossing come in one call
                weights = args[0] if args and isinstance(args[0], list) else None
                calls[_name] += len(weights) if weights is not None else 1

        setattr(pack_view.PackView, name, wrapper)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="paper_cpu")
    ap.add_argument("--experiment", default="E1")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--run-log",
        default=None,
        help="a finished run's log.jsonl (or its store entry's log.jsonl.gz): its whole-run "
        "share, from its own counts of evaluations and windows at the costs timed here",
    )
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    cfg = mbc_config.load(mbc_config.read_yaml(REPO / "config.yaml"), {"preset": a.preset})
    run_id = next(
        r
        for r in cfg.run_ids(a.experiment)
        if cfg.specs[r].task.k == a.k and cfg.specs[r].model.kind == "transformer"
    )
    spec = cfg.specs[run_id]
    import dataclasses

    short = dataclasses.replace(spec, train=dataclasses.replace(spec.train, max_steps=a.steps))
    dataset = build_dataset(spec.task, spec.seed)
    seconds: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    timed_views(seconds, calls)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        train_run(short, dataset, Path(tmp) / "run", "cpu", say=lambda _: None)
        wall = time.perf_counter() - t0
    evaluation = sum(seconds.values())
    res = {
        "cpu": cpu_model(),
        "torch": torch.__version__,
        "run": run_id,
        "steps": a.steps,
        "wall_s": wall,
        "evaluation_s": evaluation,
        "evaluation_share": evaluation / wall,
        "training_ms_per_step": 1000 * (wall - evaluation) / a.steps,
        "parts": {
            k: {"s": seconds[k], "calls": calls[k], "share": seconds[k] / wall} for k in TIMED
        },
    }
    print(f"# {res['cpu']}, torch {res['torch']}, 1 thread; {run_id}, {a.steps} steps")
    print(
        f"wall {wall:.1f} s; evaluation {evaluation:.1f} s = {100 * res['evaluation_share']:.1f}%"
    )
    print(f"training (the rest) {res['training_ms_per_step']:.1f} ms a step")
    for k in TIMED:
        p = res["parts"][k]
        print(f"  {k:34s} {p['calls']:5d} calls {p['s']:7.2f} s {100 * p['share']:5.1f}%")
    if a.run_log:
        res["whole_run"] = whole_run(Path(a.run_log), res)
        w = res["whole_run"]
        print(
            f"whole run ({w['steps']} steps, {w['evaluations']} evaluations, {w['windows']} "
            f"windows): evaluation {100 * w['evaluation_share']:.1f}% of "
            f"{w['seconds']:.0f} s modelled at these costs"
        )
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1) + "\n")
    return res


def whole_run(log: Path, res: dict) -> dict:
    """A finished run's evaluation share: its own counts (evaluation rows, training-log
    windows, steps) times the per-evaluation, per-window and per-step costs timed above
    (the first steps over-represent the log-spaced evaluations; a whole run does not)."""
    import gzip

    text = gzip.decompress(log.read_bytes()).decode() if log.suffix == ".gz" else log.read_text()
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    evals = sum("event" not in r for r in rows)
    windows = sum(r.get("event") == "train_window" for r in rows)
    steps = max(r["step"] for r in rows)
    p = res["parts"]
    per_eval = p["evaluate"]["s"] / max(p["evaluate"]["calls"], 1)
    window_parts = (
        "evaluate_sampled",
        "train_shuffled_first_loss",
        "train_batch_shuffled_first_loss",
    )
    per_window = sum(p[k]["s"] / max(p[k]["calls"], 1) for k in window_parts)
    evaluation = evals * per_eval + windows * per_window
    training = steps * res["training_ms_per_step"] / 1000
    return {
        "steps": steps,
        "evaluations": evals,
        "windows": windows,
        "seconds": evaluation + training,
        "evaluation_share": evaluation / (evaluation + training),
    }


if __name__ == "__main__":
    main()
