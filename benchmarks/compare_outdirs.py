"""The science under two arithmetics: the same runs (experiment, K, D, seed) of two outdirs,
side by side, from their tau.csv.

    python benchmarks/compare_outdirs.py A B [--experiment E1]

A and B: outdirs of one preset trained two ways, e.g. fp32 unpacked and the packed bf16
default (run ids differ by precision, so runs are matched on what defines them, not by id).
Per run: tau, first-target tau, plateau height / log K and the transition window in each,
whether tau is the same step, and where each run trained (its log's start events). The
last line counts equal taus.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from mbc.core.journal import read_journal
from mbc.core.layout import Layout

KEY = ["experiment", "k", "d", "seed"]
SHOWN = [
    ("tau", "tau"),
    ("first_target_tau", "first-target tau"),
    ("height_over_log_k", "plateau / log K"),
    ("transition_start", "window start"),
    ("transition_end", "window end"),
]


def trained_on(log) -> str:
    """Where a run's steps ran, from its log's start events ("cpu", "cuda (...)", or both
    joined by "+" when it resumed elsewhere; "cpu" for starts logged before the device)."""
    starts = [r.get("device", "cpu") for r in read_journal(log) if r.get("event") == "start"]
    return "+".join(dict.fromkeys(starts)) or "-"


def compare(a: str, b: str, experiment: str | None = None) -> pd.DataFrame:
    ta, tb = (pd.read_csv(f"{d}/tau.csv") for d in (a, b))
    if experiment:
        ta, tb = ta[ta.experiment == experiment], tb[tb.experiment == experiment]
    cols = KEY + [c for c, _ in SHOWN]
    m = ta[cols].merge(tb[cols], on=KEY, suffixes=("_a", "_b"), validate="one_to_one")
    for side, d, t in (("a", a, ta), ("b", b, tb)):
        devices = {r: trained_on(Layout(d).run(r).log) for r in t.run_id}
        m[f"device_{side}"] = m.merge(t[KEY + ["run_id"]], on=KEY, how="left").run_id.map(devices)
    m["tau_equal"] = m.tau_a.eq(m.tau_b) | (m.tau_a.isna() & m.tau_b.isna())
    m["height_diff"] = m.height_over_log_k_b - m.height_over_log_k_a
    return m.sort_values(KEY).reset_index(drop=True)


def _pair(r: pd.Series, c: str) -> str:
    """column c of run r: one value where A and B agree, else "A -> B"."""
    x, y = r[f"{c}_a"], r[f"{c}_b"]
    form = "{:.4f}" if c == "height_over_log_k" else "{:.0f}"

    def show(v) -> str:
        return "-" if pd.isna(v) else form.format(v)

    return show(x) if (pd.isna(x) and pd.isna(y)) or x == y else f"{show(x)} -> {show(y)}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--experiment", default=None)
    args = ap.parse_args(argv)
    for d in (args.a, args.b):
        if not Path(d, "tau.csv").is_file():
            raise SystemExit(
                f"compare_outdirs: {d}/tau.csv not found (build it: snakemake <outdir>/tau.csv)"
            )
    m = compare(args.a, args.b, args.experiment)
    head = ["run (exp, K, D, seed)"] + [f"{n}: A -> B" for _, n in SHOWN] + ["trained on"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for _, r in m.iterrows():
        run = f"{r.experiment}, {r.k}, {r.d}, {r.seed}"
        where = r.device_a if r.device_a == r.device_b else f"{r.device_a} -> {r.device_b}"
        print("| " + " | ".join([run] + [_pair(r, c) for c, _ in SHOWN] + [where]) + " |")
    print(
        f"tau equal in {int(m.tau_equal.sum())} of {len(m)} runs; plateau height / log K, B - A: "
        f"mean {m.height_diff.mean():+.4f}, max abs {m.height_diff.abs().max():.4f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
