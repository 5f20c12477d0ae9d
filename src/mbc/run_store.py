"""The run store's command (the store itself: `mbc.stored_runs`).

python -m mbc.run_store add   --preset paper_cpu [--outdir DIR]   # store what has finished
python -m mbc.run_store check --preset paper_cpu                  # every entry against its binding
python -m mbc.run_store list  --preset paper_cpu                  # stored N of M, by experiment
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mbc import config as mbc_config
from mbc.stored_runs import add, check, store_dir, summary_lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m mbc.run_store", description=__doc__.splitlines()[0]
    )
    ap.add_argument("action", choices=["add", "check", "list"])
    ap.add_argument("--preset", required=True)
    ap.add_argument("--config", default="config.yaml")
    ap.add_argument("--outdir", default=None, help="the outdir to store from, if not the preset's")
    ap.add_argument("--store", default=None, help="the store, if not the config's `store`")
    args = ap.parse_args(argv)
    overrides = {"preset": args.preset, **({"outdir": args.outdir} if args.outdir else {})}
    try:
        cfg = mbc_config.load(mbc_config.read_yaml(args.config), overrides)
    except (mbc_config.ConfigError, mbc_config.ConfigFileError) as exc:
        print(f"mbc.run_store: {exc}", file=sys.stderr)
        return 2
    store = Path(args.store) if args.store else store_dir(cfg)
    if store is not None and store.exists() and not store.is_dir():
        print(f"mbc.run_store: --store '{store}': not a directory", file=sys.stderr)
        return 2
    if args.action == "add" and not Path(cfg.outdir).is_dir():
        print(
            f"mbc.run_store: outdir '{cfg.outdir}' is not a directory: nothing to store from",
            file=sys.stderr,
        )
        return 2
    if store is None:
        print(
            f"mbc.run_store: preset {args.preset} has no store (config key 'store' is empty)",
            file=sys.stderr,
        )
        return 2
    if args.action == "add":
        added, left = add(cfg, store)
        print(f"mbc.run_store: {len(added)} run(s) stored now in {store}/")
        if added:
            print("  then: python -m mbc.readme_results (the README's count), git add, commit")
        if n := sum(why == "not finished" for why in left.values()):
            print(f"  {n} not finished yet")
        for run_id, why in left.items():
            if why != "not finished":
                print(f"  {run_id}: not stored yet, {why}")
    elif args.action == "check":
        problems = check(cfg, store)
        for p in problems:
            print(f"mbc.run_store: {p}", file=sys.stderr)
        print(
            f"mbc.run_store: {store}/: {'no problem' if not problems else f'{len(problems)} problem(s)'}"
        )
        if problems:
            return 1
    for line in summary_lines(cfg, store):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
