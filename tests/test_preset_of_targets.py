"""A file named on the command line under a preset's outdir builds with that preset."""

from pathlib import Path

from helpers import snakemake

from mbc import config as mbc_config

ROOT = Path(__file__).resolve().parents[1]
RAW = mbc_config.read_yaml(ROOT / "config.yaml")


def test_the_deepest_outdir_holding_every_target_names_the_preset():
    find = mbc_config.preset_of_targets
    assert find(RAW, {}, ["results/smoke/figures/noise.pdf"]) == "smoke"
    assert find(RAW, {}, ["results/figures/noise.pdf"]) == "paper"  # results/: paper's own
    assert find(RAW, {}, ["./results/quick/tau.csv", "results/quick/fits.csv"]) == "quick"
    assert find(RAW, {}, ["results/smoke/tau.csv", "results/quick/tau.csv"]) is None  # two
    assert find(RAW, {}, ["elsewhere/tau.csv"]) is None
    assert find(RAW, {}, []) is None
    # what the user wrote wins
    assert find(RAW, {"preset": "quick"}, ["results/smoke/tau.csv"]) is None
    assert find(RAW, {"outdir": "/scratch/x"}, ["results/smoke/tau.csv"]) is None


def test_targets_are_read_off_the_command_line_without_options_or_their_values():
    argv = [
        "snakemake",
        "--cores",
        "2",
        "-n",
        "results/smoke/figures/noise.pdf",
        "--configfile",
        "my.yaml",
        "--config",
        "threads=1",
        "all",
        "-s",
        "Snakefile",
    ]
    assert mbc_config.command_line_targets(argv) == ["results/smoke/figures/noise.pdf"]


def test_a_figure_named_by_its_path_plans_with_its_preset(tmp_path):
    res = snakemake("-n", "results/smoke/figures/noise.pdf")
    said = res.stdout + res.stderr
    assert "mbc: preset smoke: the outdir of the file(s) named on the command line" in said
    assert "mbc: preset smoke -> results/smoke/" in said and "preset paper" not in said
