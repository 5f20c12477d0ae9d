"""What a `snakemake` start-up does while the Snakefile is parsed (hold the outdir, repair,
plan, report), and what waits for `onstart`, which Snakemake runs only when it runs jobs
(timing a training step). The start-up's paths (a dry run, an inspection command, a run
with nothing to repair, a run with damage, another invocation holding the outdir) are
called here on planted outdirs; a whole run that repairs and rebuilds in one process is in
test_faults (test_a_broken_run_under_up_to_date_tables_is_repaired_before_planning)."""

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from helpers import REPO, planted_run, smoke_args, snakemake

from mbc import config as mbc_config
from mbc.core.artifacts import built_from, write_csv_atomic
from mbc.core.layout import Layout
from mbc.workflow import outdir_hold
from mbc.workflow.integrity import RunFiles, altered_tables, repair_all, scan
from mbc.workflow.invocation import command_line_runs_jobs, runs_jobs


def test_a_dry_run_times_nothing_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the machine's rate cache
    out = tmp_path / "out"
    res = snakemake("-n", "all", *smoke_args(out))
    said = res.stdout + res.stderr
    assert "mbc: preset smoke" in said and "distinct runs" in said, said[-2000:]
    assert "steps/s measured" not in said and "expected training wall time" not in said
    assert not (tmp_path / "cache" / "mbc").exists() and not out.exists()


def test_running_jobs_times_the_common_shape_once_at_onstart(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "out"
    cfg = mbc_config.load(
        mbc_config.read_yaml(REPO / "config.yaml"), {"preset": "smoke", "outdir": str(out)}
    )
    dataset = Layout(str(out)).dataset(next(iter(cfg.specs.values())).dataset_id)
    res = snakemake(dataset, *smoke_args(out))  # one quick job: the start-up is what we read
    said = res.stderr
    assert said.count("expected training wall time") == 1, said[-3000:]
    assert said.count("distinct runs") == 1  # the untimed lines are not printed again
    assert (tmp_path / "cache" / "mbc" / "steps_per_s.json").exists()


def test_a_profiles_dry_run_is_a_dry_run(tmp_path, monkeypatch):
    """`dryrun: true` in a profile: Snakemake's own setting says so (the command line does
    not), so the start-up repairs nothing, holds nothing and creates no outdir."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "dry").mkdir()
    (tmp_path / "dry" / "config.yaml").write_text("dryrun: true\n")
    out = tmp_path / "out"
    res = snakemake("--profile", str(tmp_path / "dry"), "all", *smoke_args(out))
    said = res.stdout + res.stderr
    assert "mbc: preset smoke" in said and "Job stats" in said, said[-2000:]
    assert not out.exists()


def _workflow(dryrun: bool = False):
    """What the start-up reads of Snakemake's workflow object: its OutputSettings."""
    return SimpleNamespace(output_settings=SimpleNamespace(dryrun=dryrun))


def _planted(root: Path) -> tuple[RunFiles, list[Path]]:
    """A finished run as the workflow leaves it (`helpers.planted_run`) and the aggregated
    tau.csv built from it, all up to date."""
    files = planted_run(root)
    tau = root / "tau.csv"
    with built_from([files.summary]):
        write_csv_atomic(tau, pd.DataFrame({"run_id": ["r"], "tau": [30]}))
    with built_from([tau]):  # a table built from an aggregated one
        write_csv_atomic(root / "statistics.csv", pd.DataFrame({"n": [1]}))
    return files, [tau]


def _start_up(root: Path, files: RunFiles, aggregates: list[Path], dry_run: bool) -> list[str]:
    """startup.smk's check and repair, as an invocation that runs jobs (or a dry run) does
    them after it holds the outdir."""
    built = {*aggregates, root / "statistics.csv", files.summary, *files.diagnostics}
    findings = scan([files], aggregates)
    altered = altered_tables(root, skip=aggregates if findings else (), built=built)
    return repair_all(root, altered, findings, [files], aggregates, built, dry_run=dry_run)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def _release_holds():
    yield
    for fh in outdir_hold._HELD.values():
        fh.close()
    outdir_hold._HELD.clear()


def _held_by_another_process(out: Path) -> bool:
    probe = "import sys; from mbc.workflow.outdir_hold import held_elsewhere as h; print(h(sys.argv[1]))"
    res = subprocess.run([sys.executable, "-c", probe, str(out)], capture_output=True, text=True)
    return res.stdout.strip() == "True"


def test_which_invocations_run_jobs_is_read_from_snakemakes_settings_and_command_line():
    """Only an invocation that runs jobs repairs: not a dry run (OutputSettings.dryrun, also
    from a profile), not --lint, nor any inspection command (abbreviated as Snakemake allows
    too); a command line that is not Snakemake's is unknown (None: nothing is repaired)."""
    run = ["snakemake", "--cores", "1", "all", "--config", "preset=smoke"]
    assert runs_jobs(_workflow(), run) is True
    assert runs_jobs(_workflow(dryrun=True), run) is False
    assert command_line_runs_jobs(["/venv/lib/snakemake/__main__.py", *run[1:]]) is True
    for flags in (
        ["-n"],
        ["--lint"],
        ["--summary"],
        ["--summ"],
        ["--detailed-summary"],
        ["--report", "r.html"],
        ["--list-changes", "code"],
        ["--list-params-changes"],
        ["--unlock"],
        ["--cleanup-metadata", "tau.csv"],
        ["--touch"],
        ["--dag"],
        ["--delete-all-output"],
    ):
        assert command_line_runs_jobs([*run, *flags]) is False, flags
    assert command_line_runs_jobs([*run, "--report", "r.html", "--report-after-run"]) is True
    assert command_line_runs_jobs(["pytest", "-q"]) is None
    assert command_line_runs_jobs([*run, "--no-such-option"]) is None


def test_a_dry_run_lists_the_repair_and_changes_nothing(tmp_path):
    files, aggregates = _planted(tmp_path)
    assert _start_up(tmp_path, files, aggregates, dry_run=False) == [], "intact"
    files.train[0].write_text("step\n0\n")  # cut: differs from its checksum
    before = _snapshot(tmp_path)
    lines = _start_up(tmp_path, files, aggregates, dry_run=True)
    assert lines[0] == (
        f"mbc: repair: {files.train[0]}: differs from the checksum written with it (cut or "
        f"edited since), would be moved aside to metrics.csv.corrupt-{lines[0].rsplit('-', 1)[1]}"
    ), lines
    assert lines[-1].endswith(
        "deleted so that the next jobs rebuild them (dry run: nothing changed)"
    )
    assert _snapshot(tmp_path) == before and not (tmp_path / ".mbc").exists()


def test_a_run_with_nothing_to_repair_holds_the_outdir_and_moves_nothing(tmp_path, _release_holds):
    files, aggregates = _planted(tmp_path)
    before = _snapshot(tmp_path)
    outdir_hold.take_outdir(tmp_path)
    assert _held_by_another_process(tmp_path), "held for the rest of this process"
    assert _start_up(tmp_path, files, aggregates, dry_run=False) == []
    assert {k: v for k, v in _snapshot(tmp_path).items() if not k.startswith(".mbc")} == before


def test_another_invocation_holding_the_outdir_stops_this_one_in_one_line(tmp_path):
    files, aggregates = _planted(tmp_path)
    files.summary.write_text("{}")  # damaged: the holder's repair or jobs deal with it
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from mbc.workflow.outdir_hold import take_outdir; "
         "take_outdir(sys.argv[1]); print('held', flush=True); time.sleep(600)", str(tmp_path)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        before = _snapshot(tmp_path)
        with pytest.raises(SystemExit) as stop:
            outdir_hold.take_outdir(tmp_path)
        assert str(stop.value) == outdir_hold.busy_line(tmp_path)
        assert "\n" not in str(stop.value) and _snapshot(tmp_path) == before
    finally:
        holder.kill()
        holder.wait()


def _kinds_of_damage():
    """Each kind of finding the start-up repairs: (name, how to plant it on `_planted`)."""

    def cut_metrics(f, root):
        f.train[0].write_text("step\n0\n")

    def dataset_gone(f, root):
        f.dataset.unlink()

    def log_damaged(f, root):
        log = f.run_dir / "state" / "log.jsonl"
        log.write_text('{"event": "start", "step": 0}\nnot json\n{"event": "done", "step": 10}\n')

    def log_gone(f, root):
        (f.run_dir / "state" / "log.jsonl").unlink()

    def summary_not_json(f, root):
        f.summary.write_text("{not json")

    def summary_gone(f, root):
        f.summary.unlink()

    def diagnostic_gone(f, root):
        f.diagnostics[0].unlink()

    def diagnostic_unverified(f, root):
        Path(f"{f.diagnostics[0]}.sha256").unlink()

    def table_edited(f, root):
        (root / "tau.csv").write_text("run_id,tau\nr,3000\n")

    def table_unverified(f, root):
        (root / "tau.csv.sha256").unlink()

    return [cut_metrics, dataset_gone, log_damaged, log_gone, summary_not_json, summary_gone,
            diagnostic_gone, diagnostic_unverified, table_edited, table_unverified]  # fmt: skip


@pytest.mark.parametrize("damage", _kinds_of_damage(), ids=lambda d: d.__name__)
def test_a_repair_leaves_missing_every_file_that_must_be_rebuilt(tmp_path, damage):
    """Snakemake rebuilds a missing file that a job wants, and reruns everything downstream
    of a job that runs; it never reruns a job whose present output looks up to date. So,
    for every kind of damage, the repair (before Snakemake plans) leaves the damaged file
    and every aggregated table built from the run missing: planning from the repaired
    outdir rebuilds the chain, with no job forced and no second start."""
    files, aggregates = _planted(tmp_path)
    damage(files, tmp_path)
    lines = _start_up(tmp_path, files, aggregates, dry_run=False)
    assert lines, "found"
    damaged = {
        "cut_metrics": files.train[0],
        "dataset_gone": files.dataset,
        "log_damaged": files.train[0],
        "log_gone": files.train[0],
        "summary_not_json": files.summary,
        "summary_gone": files.summary,
        "diagnostic_gone": files.diagnostics[0],
        "diagnostic_unverified": files.diagnostics[0],
        "table_edited": aggregates[0],
        "table_unverified": aggregates[0],
    }[damage.__name__]
    assert not damaged.exists(), lines
    assert not any(p.exists() for p in aggregates), lines
    # and what was built from them, which Snakemake would trust under a present target
    assert not (tmp_path / "statistics.csv").exists(), lines
    # and nothing damaged is left present, where Snakemake would trust it
    assert _start_up(tmp_path, files, aggregates, dry_run=True) == []


def test_snakemake_repairs_before_it_plans_in_one_process_and_only_when_it_runs_jobs(tmp_path):
    """A table without its checksum in the outdir (unverified): `-n` lists its repair and
    `--lint` says nothing, both changing nothing; a run (one quick job) moves it aside while
    the Snakefile is parsed, under the outdir's hold, and plans once: Snakemake is not
    started again."""
    out = tmp_path / "out"
    out.mkdir()
    tau = out / "tau.csv"
    tau.write_text("run_id,tau\nr,30\n")
    res = snakemake("-n", "all", *smoke_args(out))
    assert f"mbc: repair: {tau}: no checksum beside it (unverified), would be moved" in res.stderr
    snakemake("--lint", *smoke_args(out))
    assert sorted(p.name for p in out.iterdir()) == ["tau.csv"], "nothing changed or held"
    cfg = mbc_config.load(
        mbc_config.read_yaml(REPO / "config.yaml"), {"preset": "smoke", "outdir": str(out)}
    )
    dataset = Layout(str(out)).dataset(next(iter(cfg.specs.values())).dataset_id)
    res = snakemake(dataset, *smoke_args(out))
    said = res.stdout + res.stderr
    assert f"mbc: repair: {tau}: no checksum beside it (unverified), moved aside to" in said
    assert said.count("Building DAG of jobs") == 1, said[-3000:]
    assert said.index("mbc: repair:") < said.index("Building DAG of jobs")
    assert not tau.exists() and list(out.glob("tau.csv.unverified-*"))
