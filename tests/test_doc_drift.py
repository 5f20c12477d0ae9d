"""Docs that cannot drift: every dotted `mbc.*` name the docs, the README, config.yaml and
the code's comments and docstrings mention exists, and docs/method.md's tables that restate
config are the ones `python -m mbc.doc_tables` generates from it."""

import importlib
import re
from pathlib import Path

import pytest

from mbc import config as mbc_config
from mbc.doc_tables import BLOCK, COMMAND, render

ROOT = Path(__file__).resolve().parents[1]
# a dotted name beginning with the package, not part of a path or of a longer name
NAME = re.compile(r"(?<![\w./-])mbc(?:\.[A-Za-z_]\w*)+")
FILE_SUFFIXES = {"py", "md", "yaml", "csv", "json", "tex", "mplstyle", "smk", "png", "pdf"}


def resolves(name: str) -> bool:
    """Whether `name` is a module, or an attribute path under the longest module prefix."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def broken_names(paths: list[Path]) -> list[str]:
    out = []
    for path in paths:
        for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for m in NAME.finditer(line):
                name = m.group(0)
                if name.rsplit(".", 1)[1] in FILE_SUFFIXES:  # a file: mbc.mplstyle
                    continue
                if not resolves(name):
                    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                    out.append(f"{where}:{line_no}: {name}")
    return out


def test_every_mbc_name_in_the_docs_and_the_code_exists():
    paths = [
        *ROOT.glob("docs/*.md"),
        *ROOT.glob("src/**/*.py"),
        *ROOT.glob("src/**/*.yaml"),
        ROOT / "config.yaml",
        ROOT / "Snakefile",
        *ROOT.glob("workflow/**/*.smk"),
        *ROOT.glob("workflow/**/*.py"),
    ]
    assert broken_names(paths) == []


def test_every_mbc_name_in_the_readme_exists():
    assert broken_names([ROOT / "README.md"]) == []


def test_a_moved_name_is_found_with_its_file_and_line(tmp_path):
    doc = tmp_path / "m.md"
    doc.write_text(
        "ok: `mbc.training.schedule.TRANSITION_MARKS`, a file: mbc.mplstyle\n"
        "moved: `mbc.training.train.TRANSITION_MARKS` and `mbc.core.nothing_here`\n"
    )
    assert broken_names([doc]) == [
        f"{doc}:2: mbc.training.train.TRANSITION_MARKS",
        f"{doc}:2: mbc.core.nothing_here",
    ]


@pytest.fixture(scope="module")
def paper():
    return mbc_config.load(mbc_config.read_yaml(ROOT / "config.yaml"), {"preset": "paper"})


def test_method_md_restates_config_only_in_generated_blocks(paper):
    text = (ROOT / "docs" / "method.md").read_text(encoding="utf-8")
    assert {m["name"] for m in BLOCK.finditer(text)} == {
        "regimes",
        "experiments",
        "hypotheses",
        "scorecard",
        "statistics",
    }
    _, changed = render(text, paper)
    assert changed == [], f"docs/method.md is stale in {changed}: run {COMMAND}"


def test_a_changed_config_changes_its_block(paper):
    """The generated text follows config: a threshold moved in config is a stale block."""
    import dataclasses

    text = (ROOT / "docs" / "method.md").read_text(encoding="utf-8")
    h1 = paper.hypotheses.items[0]
    moved = dataclasses.replace(h1.tests[0], threshold=h1.tests[0].threshold + 0.25)
    items = (dataclasses.replace(h1, tests=(moved, *h1.tests[1:])), *paper.hypotheses.items[1:])

    class Moved:
        hypotheses = dataclasses.replace(paper.hypotheses, items=items)

        def __getattr__(self, name):  # everything else as config has it
            return getattr(paper, name)

    new, changed = render(text, Moved())
    assert changed == ["hypotheses"]
    assert f"supported if CI > {moved.threshold:g}" in new


def test_a_changed_budget_or_grid_changes_the_regime_and_experiment_tables(tmp_path):
    """The regime table reads each experiment's expanded runs (its `set`, `like` and the
    defaults), the experiment table their count: a budget or a grid value moved in
    config.yaml is a stale block."""
    raw = mbc_config.read_yaml(ROOT / "config.yaml")
    raw["experiments"]["E7"]["set"]["train.max_steps"] = 12000
    raw["experiments"]["E13"]["grid"]["task.k"] = [10, 20]
    moved = mbc_config.load(raw, {"preset": "paper"})
    text = (ROOT / "docs" / "method.md").read_text(encoding="utf-8")
    new, changed = render(text, moved)
    assert changed == ["regimes", "experiments"]
    assert "| E7 | `warmup_cosine` | 500 | 1.0 | 12,000 |" in new
    assert "| E7_30k | `warmup_cosine` | 500 | 1.0 | 30,000 |" in new  # its own set wins
    assert "| E13 | linear baseline | – | 6 |" in new
    assert "(B's identity) | E13 | 6 |" in new  # E13_identity, `like: E13`


# "| `quick` | ... 2 seeds; 129 runs | ..." in the README's preset table
PRESET_ROW = re.compile(r"^\| `(?P<preset>\w+)` \|.*?(?P<n>\d[\d,]*) runs \|", re.M)


def quoted_run_counts(text: str) -> dict[str, int]:
    return {m["preset"]: int(m["n"].replace(",", "")) for m in PRESET_ROW.finditer(text)}


def test_the_readme_quotes_each_presets_run_count_from_config():
    """The preset table's "N runs" is the number of distinct runs config expands to: a run
    added to an experiment cannot leave the README's count behind."""
    raw = mbc_config.read_yaml(ROOT / "config.yaml")
    quoted = quoted_run_counts((ROOT / "README.md").read_text(encoding="utf-8"))
    assert {"quick", "paper_cpu", "paper"} <= set(quoted)
    actual = {p: len(mbc_config.load(raw, {"preset": p}).specs) for p in quoted}
    assert quoted == actual


def test_a_stale_run_count_is_read_as_written():
    row = "| `quick` | `--config preset=quick` | 2 seeds; 1,115 runs | about 2 h |\n"
    assert quoted_run_counts(row) == {"quick": 1115}
