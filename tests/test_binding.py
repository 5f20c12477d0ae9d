"""Every output bound to what built it (reliability, third round): a derived file's sidecar
records its bytes, its inputs and the config id of the sections its rule reads; the start-up
check compares them with this invocation's, so that no spelling of the outdir, no lost
`.snakemake/` and no narrowed `only=` makes a rerun trust an old table. Each case runs on a
copy of the suite's smoke outdir under a new path: Snakemake has no record of it, exactly as
in a fresh clone with restored outputs."""

import shutil
import subprocess
import sys

from helpers import REPO, smoke_args, snakemake

from mbc import config as mbc_config
from mbc.core.artifacts import config_digest, read_sidecar
from mbc.core.built_by import pdf_stale


def _copy(smoke, tmp_path):
    out = tmp_path / "results"
    shutil.copytree(smoke, out)
    return out


def _cfg(out, **over):
    raw = mbc_config.read_yaml(REPO / "config.yaml")
    return mbc_config.load(raw, {"preset": "smoke", "outdir": str(out), **over})


def test_every_derived_file_records_the_config_it_was_built_under(smoke):
    ids = _cfg(smoke).config_ids()
    for path, rule in [
        ("statistics.csv", "statistics"),
        ("scorecard.csv", "scorecard"),
        ("fits.csv", "fits"),
        ("tex/numbers.tex", "tex"),
        ("tex/tables/scorecard.tex", "tex"),
    ]:
        assert read_sidecar(smoke / path).config == config_digest(ids[rule]), path
    figure = read_sidecar(smoke / "figures" / "noise.pdf")
    assert figure.config == config_digest(_cfg(smoke).figure_config_id("noise"))
    assert {rel for _, rel in figure.inputs} >= {"tau.csv"}


def test_a_config_change_rebuilds_the_tables_that_read_it_without_snakemakes_records(
    smoke, tmp_path
):
    out = _copy(smoke, tmp_path)
    before = (out / "statistics.csv").stat().st_mtime_ns
    untouched = (out / "tau.csv").stat().st_mtime_ns
    res = snakemake(str(out / "scorecard.csv"), *smoke_args(out), "bootstrap={n_boot: 101}")
    assert "statistics.csv: was built under other settings" in res.stderr
    assert (out / "statistics.csv").stat().st_mtime_ns != before
    assert (out / "tau.csv").stat().st_mtime_ns == untouched  # reads no bootstrap
    ids = _cfg(out, bootstrap={"n_boot": 101}).config_ids()
    assert read_sidecar(out / "statistics.csv").config == config_digest(ids["statistics"])


def test_an_edited_numbers_tex_and_a_cut_latex_table_are_rebuilt(smoke, tmp_path):
    out = _copy(smoke, tmp_path)
    numbers = out / "tex" / "numbers.tex"
    numbers.write_text(numbers.read_text().replace("1.", "7.", 1))
    table = out / "tex" / "tables" / "scorecard.tex"
    table.write_text(table.read_text()[: len(table.read_text()) // 2])
    targets = [str(numbers), str(table)]
    res = snakemake(*targets, *smoke_args(out))
    assert "numbers.tex: differs from the checksum written with it" in res.stderr
    assert numbers.read_bytes() == (smoke / "tex" / "numbers.tex").read_bytes()
    assert table.read_bytes() == (smoke / "tex" / "tables" / "scorecard.tex").read_bytes()


def test_a_plain_run_rebuilds_every_edited_source_of_the_report_and_the_pdf(smoke, tmp_path):
    """`snakemake all`, naming no file: each generated source of the report an edit left
    behind (a LaTeX table, a prose file, a figure's caption) is moved aside and rebuilt, and
    the report after them; an edited PDF too. None is trusted or left missing."""
    out = _copy(smoke, tmp_path)
    edited = [
        out / "tex" / "tables" / "definitions.tex",
        out / "tex" / "text" / "abstract.tex",
        out / "figures" / "noise.tex",
    ]
    for f in edited:
        f.write_text(f.read_text().replace(" ", "  ", 1))
    pdf = out / "paper" / "main.pdf"
    latex = shutil.which("latexmk") is not None and pdf.exists()
    if latex:
        pdf.write_bytes(pdf.read_bytes() + b"%")
    res = snakemake("all", *smoke_args(out))
    for f in edited:
        assert f"{f}: differs from the checksum written with it" in res.stderr
        assert f.read_bytes() == (smoke / f.relative_to(out)).read_bytes(), f
    if latex:
        assert f"{pdf}: differs from the checksum written with it" in res.stderr
        assert pdf_stale(pdf) is None and f"report: {pdf}\n" in res.stderr


def test_a_table_of_fewer_runs_is_rebuilt_when_the_config_asks_for_more(smoke, tmp_path):
    out = _copy(smoke, tmp_path)
    snakemake(str(out / "tau.csv"), *smoke_args(out), 'only=["E1"]')
    import pandas as pd

    assert pd.read_csv(out / "tau.csv").run_id.nunique() < len(_cfg(out).specs)
    res = snakemake(str(out / "tau.csv"), *smoke_args(out))
    assert "tau.csv: holds" in res.stderr and "superseded-" in res.stderr
    assert (out / "tau.csv").read_bytes() == (smoke / "tau.csv").read_bytes()


def test_a_users_own_file_in_the_outdir_is_left_alone(smoke, tmp_path):
    out = _copy(smoke, tmp_path)
    mine = out / "my_notes.csv"
    mine.write_text("a,b\n1,2\n")
    res = snakemake(str(out / "tau.csv"), *smoke_args(out))
    assert mine.read_text() == "a,b\n1,2\n"
    assert "my_notes" not in res.stderr


def test_a_pdf_older_than_its_sources_is_named_stale_and_not_collected(smoke, tmp_path):
    out = _copy(smoke, tmp_path)
    # the report's sources change, the PDF is not asked for (as without latexmk)
    res = snakemake(str(out / "tex" / "numbers.tex"), *smoke_args(out), "bootstrap={n_boot: 101}")
    assert (out / "paper" / "main.pdf").exists()
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith(f"report: {out}/paper/main.pdf is STALE (")
    collect = subprocess.run(
        [sys.executable, "-m", "mbc.measured", "--preset", "smoke", "--outdir", str(out),
         "--dest", str(tmp_path / "measured"), "--config", str(REPO / "config.yaml")],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert collect.returncode != 0 and "is not the report of these tables" in collect.stderr
    assert not (tmp_path / "measured").exists()


def test_a_deleted_table_takes_what_was_built_from_it_along_in_honest_words(smoke, tmp_path):
    """rm fits.csv said six healthy tables were corrupt and kept them as .corrupt-*: they
    are intact but outdated, moved aside as superseded, and rebuilt after it, equal."""
    out = _copy(smoke, tmp_path)
    (out / "fits.csv").unlink()
    (out / "fits.csv.sha256").unlink()
    res = snakemake(str(out / "scorecard.csv"), *smoke_args(out))
    assert "holds what fits.csv gave, which is missing" in res.stderr
    assert not list(out.glob("*.corrupt-*")) and list(out.glob("*.superseded-*"))
    for t in ("fits", "statistics", "scorecard"):
        assert (out / f"{t}.csv").read_bytes() == (smoke / f"{t}.csv").read_bytes(), t
