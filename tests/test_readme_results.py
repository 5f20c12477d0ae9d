"""The README's results block and docs/results.md's departures are generated from
measured/paper_cpu/ and cannot drift from it."""

import csv
import shutil
from pathlib import Path

import pytest
import yaml

from mbc import readme_results as rr
from mbc.paper.config_sections import CAUSES

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / "measured" / "paper_cpu"
CONFIG = ROOT / "config.yaml"
LINK = "measured/paper_cpu"
DOCS_LINK = "../measured/paper_cpu"


def _flat(text: str) -> str:
    """The block's prose with its line breaks undone (it is wrapped at 100 characters)."""
    return " ".join(text.split())


def _block(readme: str, begin: str = rr.BEGIN, end: str = rr.END) -> str:
    return readme.split(begin, 1)[1].split(end, 1)[0].lstrip("\n")


def _docs(tmp_path: Path) -> Path:
    """A departures page with empty markers, beside a README in tmp_path."""
    docs = tmp_path / "docs" / "results.md"
    docs.parent.mkdir(exist_ok=True)
    docs.write_text(f"# results\n\n{rr.DEPARTURES_BEGIN}\n{rr.DEPARTURES_END}\n\nrest\n")
    return docs


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
    docs = (ROOT / "docs" / "results.md").read_text()
    assert _block(docs, rr.DEPARTURES_BEGIN, rr.DEPARTURES_END) == rr.render_departures(
        MEASURED, CONFIG, DOCS_LINK
    ), (
        "docs/results.md's departures drifted from measured/paper_cpu: run python -m mbc.readme_results"
    )
    running = (ROOT / "docs" / "running.md").read_text()
    assert _block(running, rr.COST_BEGIN, rr.COST_END) == rr.render_cost(MEASURED, DOCS_LINK), (
        "docs/running.md's cost drifted from measured/paper_cpu: run python -m mbc.readme_results"
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
    lead, rest = block.split("\n\n", 1)  # the block's first sentence says it, in words
    assert _flat(lead).startswith("**In short:** under the previous configuration (")
    assert "now stale)" in lead
    warning = rest.split("\n\n", 1)[0].splitlines()  # then the STALE file's reason
    assert warning[0].startswith("> **STALE") and all(ln.startswith("> ") for ln in warning)
    assert f"[`{LINK}/STALE`]({LINK}/STALE)" in " ".join(warning)
    assert "defaults changed: eval.every 500 -> 250" in _flat(block)
    # test_measured asks the README to name a STALE file by its path
    assert "measured/paper_cpu/STALE" in block
    assert "the report (of the previous configuration: STALE):" in _flat(block), "its PDF too"


def test_check_fails_on_drift_and_the_command_repairs_it(measured, tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\n{rr.BEGIN}\nold numbers\n{rr.END}\n\nrest\n")
    docs = _docs(tmp_path)  # found beside the README without --docs
    args = ["--readme", str(readme), "--measured", str(measured), "--config", str(CONFIG)]
    assert rr.main([*args, "--check"]) == 1
    err = capsys.readouterr().err
    assert "differs" in err and str(readme) in err and str(docs) in err
    assert "old numbers" in readme.read_text()  # --check changes nothing
    assert rr.DEPARTURES_BEGIN + "\n" + rr.DEPARTURES_END in docs.read_text()
    assert rr.main(args) == 0
    text = readme.read_text()
    assert text.startswith("# title\n\n") and text.endswith(f"{rr.END}\n\nrest\n")
    assert "old numbers" not in text and "scorecard rows agree" in text
    page = docs.read_text()
    assert page.startswith("# results\n\n") and page.endswith(f"{rr.DEPARTURES_END}\n\nrest\n")
    assert "Scorecard rows that disagree" in page
    assert "[`../paper_cpu`](../paper_cpu)" in page  # linked from docs/, not from the README
    assert rr.main([*args, "--check"]) == 0


def test_bad_inputs_fail_in_one_line(measured, tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("no markers here\n")
    args = ["--readme", str(readme), "--measured", str(measured), "--config", str(CONFIG)]
    docs = _docs(tmp_path)
    assert rr.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(readme) in err and rr.BEGIN in err

    readme.write_text(f"{rr.END}\n{rr.BEGIN}\n")
    assert rr.main(args) == 2
    assert "comes before" in capsys.readouterr().err

    readme.write_text(f"{rr.BEGIN}\n{rr.END}\n")
    docs.unlink()
    assert rr.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{docs}: missing" in err
    _docs(tmp_path)

    (measured / "scorecard.csv").unlink()
    assert rr.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "scorecard.csv: missing" in err


def test_a_missing_paper_verdict_names_its_key(measured, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("hypotheses: {H1: {mechanism: m, prediction: p, tests: []}}\n")
    with pytest.raises(rr.ResultsError, match=r"hypotheses\.H1\.paper_verdict\.verdict"):
        rr.render(measured, config, LINK)


def _disagreeing(measured: Path) -> list[dict]:
    with (measured / "scorecard.csv").open(newline="") as f:
        return [
            r
            for r in csv.DictReader(f)
            if r["reference_traced"] != "ours" and r["agreement"] != "agree"
        ]


def test_each_departure_carries_the_cause_its_report_recorded(measured):
    def explain(rows):
        for r in rows:
            r["cause"], r["explanation"] = "", ""
            if r["reference_traced"] != "ours" and r["agreement"] != "agree":
                r["cause"], r["explanation"] = "scale", f"planted reason for {r['claim']}"
            if r["agreement"] == "agree":
                r["explanation"] = "a reason that must not be printed"
        return rows

    _edit(measured / "scorecard.csv", explain)
    _edit(
        measured / "hypotheses.csv", lambda rows: [dict(r, cause="", explanation="") for r in rows]
    )
    page = _flat(rr.render_departures(measured, CONFIG, DOCS_LINK))
    off = _disagreeing(measured)
    assert off, "the committed report has a disagreeing row to test with"
    for r in off:
        assert f"**{r['claim']}** (`{r['statistic']}`)" in page
        assert f"*Cause: {CAUSES['scale']}.* Planted reason for {r['claim']}." in page
    assert "a reason that must not be printed" not in page
    # a verdict that differs and whose report recorded no cause says so
    assert "*No cause is recorded in config.yaml for it.*" in page


def test_an_agreeing_report_lists_no_departures(measured):
    def all_agree(rows):
        return [dict(r, agreement="agree", ours_agreement="agree") for r in rows]

    _edit(measured / "scorecard.csv", all_agree)
    _edit(
        measured / "hypotheses.csv",
        lambda rows: [dict(r, paper_verdict=r["verdict"]) for r in rows],
    )
    page = rr.render_departures(measured, CONFIG, DOCS_LINK)
    assert page.count("None.") == 4, page


def test_an_older_report_takes_configs_reason_only_for_the_statistic_it_measured(
    measured, tmp_path
):
    """A report collected before scorecard.csv had `cause` reads config's explanation, but
    only where config's row still measures the same statistic."""
    off = _disagreeing(measured)[0]
    declared = yaml.safe_load(CONFIG.read_text())
    row = {
        "claim": off["claim"],
        "statistic": off["statistic"],
        "explanation": {"cause": "failure", "text": "planted from config"},
    }
    declared["scorecard"] = [row]
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(declared))
    _edit(
        measured / "scorecard.csv",
        lambda rows: [
            {k: v for k, v in r.items() if k not in ("cause", "explanation")} for r in rows
        ],
    )
    page = _flat(rr.render_departures(measured, config, DOCS_LINK))
    assert f"*Cause: {CAUSES['failure']}.* Planted from config." in page
    row["statistic"] = "another_statistic"
    config.write_text(yaml.safe_dump(declared))
    page = _flat(rr.render_departures(measured, config, DOCS_LINK))
    assert "Planted from config" not in page
    assert "now measures it by another statistic" in page
    # a glob in config (`fit:tau_vs_k_at_*`) matches the report's expanded statistic
    row["statistic"] = off["statistic"][:-2] + "*"
    row["explanation"]["text"] = ""  # a cause without a text: the cause alone
    config.write_text(yaml.safe_dump(declared))
    page = _flat(rr.render_departures(measured, config, DOCS_LINK))
    (item,) = [p for p in page.split("- **") if p.startswith(off["claim"] + "**")]
    assert item.rstrip().endswith(f"*Cause: {CAUSES['failure']}.*"), item


def test_every_cause_config_accepts_has_words():
    schema = yaml.safe_load((ROOT / "src" / "mbc" / "core" / "config.schema.yaml").read_text())

    def enums(node):
        if isinstance(node, dict):
            if "cause" in node and isinstance(node["cause"], dict) and "enum" in node["cause"]:
                yield node["cause"]["enum"]
            for v in node.values():
                yield from enums(v)
        elif isinstance(node, list):
            for v in node:
                yield from enums(v)

    found = list(enums(schema))
    assert found and all(set(e) == set(CAUSES) for e in found)


def test_the_training_cost_is_read_from_provenance(measured):
    """The sentence under the block's title says what the training cost, as PROVENANCE
    records it: on the CPU alone with its threads and the CPU, with a GPU by device; an
    older PROVENANCE without the line says nothing about it."""
    prov = measured / "PROVENANCE"
    keep = ("CPU: ", "threads per training job: ", "runs: ", "device: ", "training job")
    lines = [ln for ln in prov.read_text().splitlines() if not ln.startswith(keep)]
    prov.write_text("\n".join(lines) + "\n")
    assert " h of training in " not in _flat(rr.render(measured, CONFIG, LINK))

    def cost(*extra: str) -> str:
        prov.write_text("\n".join([*lines, *extra]) + "\n")
        block = _flat(rr.render(measured, CONFIG, LINK))
        said = block.split("Measured by the `paper_cpu` preset (", 1)[1]
        return said.split("; the report", 1)[0].removesuffix(")")

    common = ["runs: 137 (run ids: tau.csv; sha256 of the sorted ids 0)"]
    common += ["threads per training job: 1 (150)"]
    on_cpu = "training job time: 27.34 h in 60 training job(s) (cpu 27.34 h); each job's"
    assert (
        cost(*common, "device: cpu (150)", "CPU: AMD EPYC (150)", on_cpu)
        == "137 runs; 27.3 h of training in 60 jobs of 1 thread(s) on AMD EPYC"
    )
    # two CPUs: none named
    assert (
        cost(*common, "device: cpu (150)", "CPU: AMD EPYC (100), Xeon (50)", on_cpu)
        == "137 runs; 27.3 h of training in 60 jobs of 1 thread(s)"
    )
    # a GPU trained some: by device, no CPU named
    mixed = "training job time: 12.00 h in 1 training job(s) (cpu 11.50 h; cuda (H200) 0.50 h);"
    assert (
        cost(*common, "device: cpu (100), cuda (H200) (50)", "CPU: Xeon (150)", mixed)
        == "137 runs; 12.0 h of training in 1 job (cpu 11.50 h; cuda (H200) 0.50 h)"
    )


def test_the_running_pages_cost_is_provenances(measured, tmp_path, capsys):
    """docs/running.md's cost item is PROVENANCE's runs, steps by device, job time and span,
    and says STALE when the report is; the command writes it where the page exists, and an
    older PROVENANCE without a runs line fails in one line."""
    prov = measured / "PROVENANCE"
    prov.write_text(
        "runs: 140 (run ids: tau.csv; sha256 of the sorted ids 0)\n"
        "started: 2026-12-05T10:00:00Z\nended: 2026-12-06T22:30:00Z\n"
        "wall time: 36.50 h from the first start to the last end\n"
        "device: cpu (150)\nCPU: AMD EPYC (150)\nthreads per training job: 1 (150)\n"
        "total training steps: 1,200,000\nsteps by device: cpu 1,200,000\n"
        "training job time: 27.34 h in 60 training job(s) (cpu 27.34 h); each job's\n"
    )
    text = " ".join(rr.render_cost(measured, "../m").split())
    assert text == (
        "- Measured ([`../m/PROVENANCE`](../m/PROVENANCE)): 140 runs, 1,200,000 training steps"
        " (cpu 1,200,000); 27.3 h of training in 60 jobs of 1 thread(s) on AMD EPYC. From its"
        " first start to its last end 36.5 h (2026-12-05T10:00:00Z to 2026-12-06T22:30:00Z),"
        " the gaps between sessions included."
    )
    (measured / "STALE").write_text("moved on\n")
    assert rr.render_cost(measured, "../m").rstrip().endswith("measurement (`STALE`).")
    readme = tmp_path / "README.md"
    readme.write_text(f"{rr.BEGIN}\n{rr.END}\n")
    _docs(tmp_path)
    running = tmp_path / "docs" / "running.md"
    running.write_text(f"# running\n\n{rr.COST_BEGIN}\n{rr.COST_END}\n- an estimate\n")
    args = ["--readme", str(readme), "--measured", str(measured), "--config", str(CONFIG)]
    assert rr.main(args) == 0
    page = running.read_text()
    assert "140 runs" in page and page.endswith(f"{rr.COST_END}\n- an estimate\n")
    assert "(../../paper_cpu/PROVENANCE)" in page or "paper_cpu/PROVENANCE" in page
    prov.write_text("total training steps: 1\n")
    capsys.readouterr()
    assert rr.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "PROVENANCE: no 'runs:' line" in err


def test_the_first_sentence_says_what_the_tables_show_and_whether_whole(measured):
    """One plain sentence first: complete, stale, or a partial re-measure (N of M stored)."""
    lead = _flat(rr.render(measured, CONFIG, LINK).split("\n\n", 1)[0])
    assert lead.startswith("**In short:** the committed measurement (")
    assert "complete) reproduces " in lead and " of the paper's " in lead and "partial" not in lead
    (measured / "runs" / "not-a-run-of-the-preset").mkdir(parents=True)  # a store, none of it
    lead = _flat(rr.render(measured, CONFIG, LINK).split("\n\n", 1)[0])
    assert "complete" not in lead
    assert "the re-measure of the current configuration is partial, 0 of " in lead
    assert lead.endswith(" runs stored so far.")
