"""The README's results block is generated from measured/paper_cpu/ and cannot drift from it."""

import csv
import shutil
from pathlib import Path

import pytest

from mbc import readme_results as rr

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / "measured" / "paper_cpu"
CONFIG = ROOT / "config.yaml"
LINK = "measured/paper_cpu"


def _flat(text: str) -> str:
    """The block's prose with its line breaks undone (it is wrapped at 100 characters)."""
    return " ".join(text.split())


def _block(readme: str) -> str:
    return readme.split(rr.BEGIN, 1)[1].split(rr.END, 1)[0].lstrip("\n")


@pytest.fixture
def measured(tmp_path) -> Path:
    """A copy of the committed report's tables, to change without touching the repository."""
    d = tmp_path / "paper_cpu"
    d.mkdir()
    for name in ("scorecard.csv", "hypotheses.csv", "PROVENANCE"):
        shutil.copy(MEASURED / name, d / name)
    return d


def _edit(path: Path, change) -> None:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = list(reader.fieldnames), list(reader)
    rows = change(rows)
    fields += [k for k in rows[0] if k not in fields]  # a column the change added
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def test_the_readme_block_is_what_the_committed_report_gives():
    readme = (ROOT / "README.md").read_text()
    assert _block(readme) == rr.render(MEASURED, CONFIG, LINK), (
        "README.md's results block drifted from measured/paper_cpu: run "
        "python -m mbc.readme_results"
    )
    assert (
        rr.main(
            [
                "--readme",
                str(ROOT / "README.md"),
                "--measured",
                str(MEASURED),
                "--config",
                str(CONFIG),
                "--check",
            ]
        )
        == 0
    )


def test_the_tally_is_counted_from_the_rows(measured):
    before = _flat(rr.render(measured, CONFIG, LINK))
    with (measured / "scorecard.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    papers = [r for r in rows if r["reference_traced"] != "ours"]
    agree = sum(r["agreement"] == "agree" for r in papers)
    assert f"**{agree} of the paper's {len(papers)} scorecard rows agree" in before

    def flip_first_agreeing(rows):
        first = next(
            r for r in rows if r["agreement"] == "agree" and r["reference_traced"] != "ours"
        )
        first["agreement"] = "disagree"
        return rows

    _edit(measured / "scorecard.csv", flip_first_agreeing)
    after = _flat(rr.render(measured, CONFIG, LINK))
    assert f"**{agree - 1} of the paper's {len(papers)} scorecard rows agree" in after


def test_a_row_added_to_the_scorecard_appears_and_is_counted(measured):
    def add(rows):
        new = dict(rows[0], claim="a claim added by a later session", agreement="agree")
        return [*rows, new]

    with (measured / "scorecard.csv").open(newline="") as f:
        n_papers = sum(r["reference_traced"] != "ours" for r in csv.DictReader(f))
    _edit(measured / "scorecard.csv", add)
    block = _flat(rr.render(measured, CONFIG, LINK))
    assert "| a claim added by a later session |" in block
    assert f"of the paper's {n_papers + 1} scorecard rows agree" in block


def test_verdicts_are_matched_against_the_papers(measured):
    block = rr.render(measured, CONFIG, LINK)
    rows = [ln for ln in block.splitlines() if ln.startswith("| H")]
    assert len(rows) == 7, rows  # one row per hypothesis, however many tests it has
    n_yes = sum(ln.rstrip(" |").endswith("yes") for ln in rows)
    assert f"{n_yes} of 7 verdicts match the paper's" in _flat(block)

    def paper_says_supported(rows):  # a report that carries the paper's verdict itself
        for r in rows:
            r["paper_verdict"] = r["verdict"] if r["id"] != "H1" else "supported"
        return rows

    _edit(measured / "hypotheses.csv", paper_says_supported)
    block = _flat(rr.render(measured, CONFIG, LINK))
    assert "6 of 7 verdicts match the paper's** (H1 does not)" in block
    assert "| H1 | gradient cancellation across groups sharing z | supported |" in block


def test_a_stale_report_says_so_first(measured):
    assert "STALE" not in rr.render(measured, CONFIG, LINK)
    (measured / "STALE").write_text("defaults changed: eval.every 500 -> 250\n")
    block = rr.render(measured, CONFIG, LINK)
    warning = block.split("\n\n", 1)[0].splitlines()  # the block's first paragraph
    assert warning[0].startswith("> **STALE") and all(ln.startswith("> ") for ln in warning)
    assert f"[`{LINK}/STALE`]({LINK}/STALE)" in " ".join(warning)
    assert "defaults changed: eval.every 500 -> 250" in _flat(block)
    # test_measured asks the README to name a STALE file by its path
    assert "measured/paper_cpu/STALE" in block


def test_check_fails_on_drift_and_the_command_repairs_it(measured, tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\n{rr.BEGIN}\nold numbers\n{rr.END}\n\nrest\n")
    args = ["--readme", str(readme), "--measured", str(measured), "--config", str(CONFIG)]
    assert rr.main([*args, "--check"]) == 1
    assert "differs" in capsys.readouterr().err
    assert "old numbers" in readme.read_text()  # --check changes nothing
    assert rr.main(args) == 0
    text = readme.read_text()
    assert text.startswith("# title\n\n") and text.endswith(f"{rr.END}\n\nrest\n")
    assert "old numbers" not in text and "scorecard rows agree" in text
    assert rr.main([*args, "--check"]) == 0


def test_bad_inputs_fail_in_one_line(measured, tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("no markers here\n")
    args = ["--readme", str(readme), "--measured", str(measured), "--config", str(CONFIG)]
    assert rr.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(readme) in err and rr.BEGIN in err

    readme.write_text(f"{rr.END}\n{rr.BEGIN}\n")
    assert rr.main(args) == 2
    assert "comes before" in capsys.readouterr().err

    (measured / "scorecard.csv").unlink()
    assert rr.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "scorecard.csv: missing" in err


def test_a_missing_paper_verdict_names_its_key(measured, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("hypotheses: {H1: {mechanism: m, prediction: p, tests: []}}\n")
    with pytest.raises(rr.ResultsError, match=r"hypotheses\.H1\.paper_verdict\.verdict"):
        rr.render(measured, config, LINK)
