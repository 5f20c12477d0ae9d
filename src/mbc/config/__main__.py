"""`python -m mbc.config [--base config.yaml] FILE ...`: check config files before a run.

Snakemake reads `--configfile` itself, before our Snakefile runs, so its own messages for a
missing file or a YAML error name no file or line; this check does."""

from __future__ import annotations

import argparse

from mbc.config import ConfigError, ConfigFileError, check_files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mbc.config", description=__doc__)
    parser.add_argument("files", nargs="*", help="files you would pass to --configfile")
    parser.add_argument("--base", default="config.yaml", help="the workflow's config.yaml")
    args = parser.parse_args(argv)
    try:
        cfg = check_files(args.files, args.base)
    except (ConfigError, ConfigFileError) as exc:
        print(f"mbc: {exc}")
        return 1
    print(f"mbc: valid: preset {cfg.preset}, {len(cfg.specs)} runs, outdir {cfg.outdir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
