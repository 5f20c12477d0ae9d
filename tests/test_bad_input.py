"""Bad input is refused in one line naming the key, file or argument as the user wrote it,
with nothing written: duplicate YAML keys, outdirs that cannot be one, a paper_pdf among
the outdir's outputs, and every `mbc.*` command's arguments (no traceback)."""

import os
import re
import subprocess
import sys

import pytest
from helpers import REPO

from mbc.config import ConfigError, ConfigFileError, load, read_yaml
from mbc.core.layout import canonical_outdir


@pytest.fixture(scope="module")
def raw():
    return read_yaml(REPO / "config.yaml")


def test_a_key_given_twice_is_refused_with_its_line(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("preset: smoke\nbootstrap: {n_boot: 10}\nseeds: [0]\nbootstrap: {n_boot: 20}\n")
    with pytest.raises(
        ConfigFileError, match=r"mine.yaml, line 4, column 1: .*duplicate key 'bootstrap'"
    ):
        read_yaml(f)


def test_a_key_given_twice_in_a_nested_mapping_is_refused(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("defaults:\n  train: {lr: 0.1}\n  train: {lr: 0.2}\n")
    with pytest.raises(ConfigFileError, match="duplicate key 'train'"):
        read_yaml(f)


def test_every_spelling_of_one_outdir_is_one_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results" / "smoke").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "results")
    spellings = ["results/smoke", "./results/smoke/", f"{tmp_path}/results/smoke", "results//smoke"]
    assert {canonical_outdir(s) for s in spellings} == {"results/smoke"}
    assert canonical_outdir("/elsewhere/out/") == "/elsewhere/out"
    # a symlink keeps its name: targets named through it match (its lock resolves it)
    assert canonical_outdir("./link/smoke/") == "link/smoke"


@pytest.mark.parametrize(
    "make, said",
    [
        (lambda t: (t / "f").write_text("x") and t / "f" / "out", "lies below .*f, which is not a directory"),
        (lambda t: (t / "f").write_text("x") and t / "f", "exists and is not a directory"),
        (lambda t: (t / "d").symlink_to(t / "nothing") or t / "d", "is a symlink to nothing"),
        (lambda t: (t / "a").symlink_to(t / "b") or (t / "b").symlink_to(t / "a") or t / "a", "is a symlink to nothing"),
    ],
)  # fmt: skip
def test_a_path_that_cannot_be_an_outdir_names_the_key(raw, tmp_path, make, said):
    out = make(tmp_path)
    with pytest.raises(ConfigError, match=f"'outdir' = '{out}': {said}"):
        load(raw, {"preset": "smoke", "outdir": str(out)})


def test_a_store_that_cannot_be_a_directory_names_the_key(raw, tmp_path):
    """config key `store`: a file (or a path below one) is refused in one line, as the
    outdir is; one that does not exist yet is made when a run is added."""
    (tmp_path / "a_file").write_text("x")
    for written, said in (
        (str(tmp_path / "a_file"), "exists and is not a directory"),
        (str(tmp_path / "a_file" / "runs"), "lies below .*, which is not a directory"),
    ):
        with pytest.raises(
            ConfigError, match=f"config key 'store' = '{re.escape(written)}': {said}"
        ):
            load(raw, {"preset": "smoke", "store": written})
    assert load(raw, {"preset": "smoke", "store": str(tmp_path / "new")}).raw["store"]


def test_a_paper_pdf_among_the_outdirs_outputs_is_refused(raw):
    with pytest.raises(ConfigError, match="'paper_pdf'.*among the outdir's other outputs"):
        load(raw, {"preset": "smoke", "paper_pdf": "results/smoke/figures/noise.pdf"})
    assert (
        load(raw, {"preset": "smoke", "paper_pdf": "/tmp/mine.pdf"}).raw["paper_pdf"]
        == "/tmp/mine.pdf"
    )


def _tool(*args):
    env = {k: v for k, v in os.environ.items() if k != "MBC_CONSOLE"}
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, env=env
    )


@pytest.mark.parametrize(
    "args, said",
    [
        (["mbc.estimate", "--preset", "smoke", "--steps-per-s", "0"], "--steps-per-s: '0': must be a finite number above 0"),
        (["mbc.estimate", "--preset", "smoke", "--steps-per-s", "-3"], "must be a finite number above 0"),
        (["mbc.estimate", "--preset", "smoke", "--rates", "/nonexistent.json"], "--rates: /nonexistent.json: cannot read"),
        (["mbc.estimate", "--preset", "smoke", "--rates", "config.yaml"], "--rates: config.yaml: not valid JSON"),
        (["mbc.status", "--preset", "smoke", "--plot", "out.txt"], "--plot: out.txt: must end in .png or .pdf"),
        (["mbc.readme_results", "--check", "--config", "nonexist.yaml"], "--config nonexist.yaml: cannot read"),
        (["mbc.run_store", "list", "--preset", "nope"], "unknown preset"),
        (["mbc.run_store", "list", "--preset", "paper_cpu", "--store", "README.md"], "--store 'README.md': not a directory"),
        (["mbc.run_store", "add", "--preset", "paper_cpu", "--outdir", "/nonexistent/out"], "outdir '/nonexistent/out' is not a directory"),
        (["mbc.doc_tables", "/nonexistent/method.md"], "'/nonexistent/method.md': No such file"),
    ],
)  # fmt: skip
def test_a_bad_argument_is_one_line_and_no_traceback(args, said):
    res = _tool(*args)
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    # one line says what is wrong (argparse prints its usage above it)
    assert re.search(said, res.stderr.strip().splitlines()[-1]), res.stderr


@pytest.mark.parametrize(
    "dest, said",
    [
        (lambda smoke: "config.yaml", "config.yaml is not a directory"),
        (str, "is the outdir's own tree"),
        (lambda smoke: "/proc/no/such/dest", "--dest '/proc/no/such/dest': No such file"),
    ],
)
def test_measured_refuses_a_dest_it_cannot_write_into(smoke, dest, said):
    before = sorted(p.name for p in smoke.iterdir())
    res = _tool("mbc.measured", "--preset", "smoke", "--outdir", str(smoke), "--dest", dest(smoke))
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert said in res.stderr and "nothing written" in res.stderr
    assert sorted(p.name for p in smoke.iterdir()) == before
