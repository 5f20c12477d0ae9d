"""The fault suite (issue 25): each fault class with its exact outcome, mostly on copies
of the shared smoke run. Where a class is tested elsewhere, the test is named here.

| fault class | outcome | test |
|---|---|---|
| truncated rows (a table cut, still parsing) | moved aside, rebuilt from the run's log; tables equal the clean run's | here |
| torn lines (a log's last line cut mid-write) | the line is ignored; the run stays finished, nothing rebuilds | here |
| corrupt JSON (summary.json not JSON, with or without its checksum) | moved aside at start-up, rebuilt in one rerun; tables equal | here |
| corrupt state (resume.pt truncated in an unfinished run) | one console line; the run retrains from step 0; tables equal | here |
| corrupt dataset / snapshot, a deleted run directory | moved aside, the chain rebuilds; tables equal bitwise | test_reliability, test_workflow |
| divergence | stops, recorded as diverged, never censored; the lr row is not flipped | test_divergence |
| a concurrent invocation, inspection commands | repair nothing; the second invocation says so | here |
| a read-only outdir | one line before any job | here |
| all-censored selections | empty tables, "not enough data", figures say "no data" | test_figures |
| kill -9 and resume | resumes; final tables bitwise equal an uninterrupted run's | test_reliability |
| a stale Snakemake lock | recognised at start-up, one line with the fix | here |

The second round (issue 38: identity bound to content, one writer per run, validation
before repair, no tracebacks, words that match) has its table, each row with its test here,
in docs/reliability-faults.md.
"""

import contextlib
import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers import REPO, smoke_args, snakemake, snakemake_exe

from mbc import config as mbc_config


@contextlib.contextmanager
def _held(code: str, *args, ready: str = "held"):
    """A process running `code` (args after it) that prints `ready` once it holds what it
    holds (a lock, a run); killed, and so releasing it, when the block ends."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == ready
        yield proc
    finally:
        proc.kill()
        proc.wait()


# the smoke preset's distinct runs (the banner's counts name them)
N_SMOKE = len(
    mbc_config.load(mbc_config.read_yaml(REPO / "config.yaml"), {"preset": "smoke"}).specs
)

TABLES = ["tau", "statistics", "hypotheses", "scorecard"]


def _copy(smoke, tmp_path):
    out = tmp_path / "results"
    shutil.copytree(smoke, out)  # keeps mtimes: the copy is up to date
    return out


def _equal_tables(out, smoke):
    for t in TABLES:
        a, b = pd.read_csv(out / f"{t}.csv"), pd.read_csv(smoke / f"{t}.csv")
        wall = [c for c in a.columns if c.startswith("wall")]
        pd.testing.assert_frame_equal(a.drop(columns=wall), b.drop(columns=wall), check_exact=True)


def _tables(out, *flags, check=True):
    """snakemake on the tables a statistic reads (figures and the PDF would rebuild too,
    at CI's expense)."""
    targets = (str(out / f"{t}.csv") for t in TABLES)
    return snakemake(*flags, *targets, *smoke_args(out), check=check)


def _cut_rows(path, keep: int) -> None:
    """The table's header and first `keep` rows, final newline kept (a well-formed CSV)."""
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[: 1 + keep]))


def test_tables_with_rows_cut_are_rebuilt_not_trusted(smoke, tmp_path):
    """A run's metrics.csv cut to 16 rows (header and final newline kept: it still parses)
    and tau.csv cut to 3: a plain rerun rebuilds both, and every table equals the clean
    run's (before, the run's first-target tau went NaN and the lr row read "not measured")."""
    out = _copy(smoke, tmp_path)
    tau = pd.read_csv(smoke / "tau.csv")
    run = tau[tau.experiment == "E6"].run_id.iloc[0]
    metrics = out / "runs" / run / "metrics.csv"
    before = metrics.read_bytes()
    _cut_rows(metrics, 16)
    _cut_rows(out / "tau.csv", 3)
    res = _tables(out)
    said = res.stdout + res.stderr
    assert f"{metrics}: differs from the checksum written with it" in said, said[-3000:]
    assert f"{out}/tau.csv: differs from the checksum" in said, said[-3000:]
    assert list(metrics.parent.glob("metrics.csv.corrupt-*")), "moved aside, not lost"
    assert metrics.read_bytes() == before, "rebuilt from the run's log, as it was"
    _equal_tables(out, smoke)


def test_a_broken_run_under_up_to_date_tables_is_repaired_before_planning(smoke, tmp_path):
    """A run's summary.json edited (still JSON) under up-to-date tables, scorecard.csv
    asked for: the start-up moves it aside and deletes the aggregated tables before
    Snakemake plans, so the one DAG it builds reruns the summary, tau.csv and every table
    above them (nothing forced, no second start), equal to the clean run's."""
    out = _copy(smoke, tmp_path)
    run = pd.read_csv(smoke / "tau.csv").run_id.iloc[0]
    summary = out / "runs" / run / "summary.json"
    summary.write_text(summary.read_text().replace('"run_id"', '"run_id" ', 1))
    before = (out / "scorecard.csv").stat().st_mtime_ns
    res = snakemake(str(out / "scorecard.csv"), *smoke_args(out))
    said = res.stdout + res.stderr
    assert f"mbc: repair: {summary}: differs from the checksum" in said, said[-3000:]
    assert said.count("Building DAG of jobs") == 1, said[-3000:]
    assert said.index("mbc: repair:") < said.index("Building DAG of jobs")
    assert summary.read_bytes() == (smoke / "runs" / run / "summary.json").read_bytes()
    assert (out / "scorecard.csv").stat().st_mtime_ns != before, "rebuilt, not trusted"
    for t in ("tau", "statistics", "scorecard"):
        assert (out / f"{t}.csv").read_bytes() == (smoke / f"{t}.csv").read_bytes(), t


def test_inspection_commands_and_a_second_invocation_repair_nothing(smoke, tmp_path):
    out = _copy(smoke, tmp_path)
    run = pd.read_csv(smoke / "tau.csv").run_id.iloc[0]
    metrics = out / "runs" / run / "metrics.csv"
    _cut_rows(metrics, 2)
    cut = metrics.read_bytes()
    # a dry run lists the repair, changing nothing; --lint and --list-changes run no jobs,
    # so they neither repair nor hold the outdir
    res = snakemake("-n", str(out / "tau.csv"), *smoke_args(out))
    said = res.stdout + res.stderr
    assert f"mbc: repair: {metrics}: differs from the checksum" in said, said[-2000:]
    assert "(dry run: nothing changed)" in said, said[-2000:]
    for flags in (["--list-changes", "code"], ["--lint"]):
        snakemake(*flags, *smoke_args(out))
        assert metrics.read_bytes() == cut, flags
        assert not list(metrics.parent.glob("metrics.csv.corrupt-*")), flags
    # another invocation holds the outdir (as a running `snakemake` does)
    lock = out / ".mbc" / "outdir.lock"
    with _held(
        "import fcntl, sys, time; f = open(sys.argv[1], 'a'); "
        "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(600)",
        lock,
    ):
        res = snakemake(str(out / "tau.csv"), *smoke_args(out), check=False)
        assert "another snakemake is running on" in res.stderr, res.stderr[-2000:]
        assert metrics.read_bytes() == cut, "a second invocation never repairs"
        assert not list(metrics.parent.glob("metrics.csv.corrupt-*"))
    with open(lock, "a") as fh:  # released with its holder
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_an_outdir_that_cannot_be_written_is_one_line(tmp_path):
    """A read-only outdir (here one under /sys, which refuses even root): one line naming
    it, before any job; it was a raw OSError traceback from the banner's cache."""
    from mbc.core.artifacts import unwritable

    assert unwritable(tmp_path / "new" / "outdir") is None
    assert unwritable("/sys/kernel/mbc-test-outdir") is not None
    res = snakemake("all", *smoke_args("/sys/kernel/mbc-test-outdir"), check=False)
    err = res.stderr.strip().splitlines()
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert err[-1].startswith("mbc: outdir '/sys/kernel/mbc-test-outdir' cannot be written to")


def test_the_banner_warns_when_the_disk_is_smaller_than_the_runs_need(tmp_path, monkeypatch):
    import mbc.planning.banner
    from mbc import config as mbc_config

    # the live smoke preset: the banner Snakemake prints for it
    cfg = mbc_config.load(
        mbc_config.read_yaml(str(Path(__file__).resolve().parents[1] / "config.yaml")),
        {"preset": "smoke", "outdir": str(tmp_path / "out")},
    )
    monkeypatch.setattr(mbc.planning.banner, "_free_bytes", lambda p: 1000)
    lines = mbc.planning.banner.banner_lines(cfg, cores=2, measure=False, dry_run=True)
    assert any(x.startswith("mbc: WARNING") and "free, less than the runs" in x for x in lines)
    monkeypatch.setattr(mbc.planning.banner, "_free_bytes", lambda p: 10**15)
    lines = mbc.planning.banner.banner_lines(cfg, cores=2, measure=False, dry_run=True)
    assert not any("free, less than" in x for x in lines)


def test_a_stale_snakemake_lock_on_the_outdir_is_recognised(tmp_path):
    """After kill -9, Snakemake's lock files name the outdir's files; asked while no
    invocation holds the outdir, that is a stale lock (the start-up says how to clear it)."""
    from mbc.workflow.outdir_hold import stale_lock

    locks, out, other = tmp_path / "locks", tmp_path / "out", tmp_path / "other"
    locks.mkdir()
    assert not stale_lock(locks, out)
    (locks / "0.output.lock").write_text(f"{other}/tau.csv\n")
    assert not stale_lock(locks, out), "another outdir's lock is not this outdir's"
    (locks / "1.input.lock").write_text(f"{out}/runs/r/metrics.csv\n")
    assert stale_lock(locks, out)


def test_the_banner_counts_at_most_this_machines_cores(tmp_path):
    import os

    import mbc.planning.banner
    from mbc import config as mbc_config

    # the live smoke preset: the banner Snakemake prints for it
    cfg = mbc_config.load(
        mbc_config.read_yaml(str(Path(__file__).resolve().parents[1] / "config.yaml")),
        {"preset": "smoke", "outdir": str(tmp_path / "out")},
    )
    lines = mbc.planning.banner.banner_lines(cfg, cores=10_000, dry_run=True)
    (wall,) = [x for x in lines if "expected training wall time" in x]
    assert f"with {os.cpu_count()} parallel job(s)" in wall, wall


def test_the_banner_of_an_outdir_with_nothing_to_train_names_no_device(tmp_path):
    """device: auto is resolved only where something trains (asking for CUDA imports torch):
    with every run's log finished the banner says so instead of printing 'on auto'."""
    import json

    import mbc.planning.banner
    from mbc.core.layout import Layout

    cfg = mbc_config.load(
        mbc_config.read_yaml(str(REPO / "config.yaml")),
        {"preset": "smoke", "outdir": str(tmp_path / "out")},
    )
    for run_id in cfg.specs:
        log = Layout(cfg.outdir).run(run_id).log
        log.parent.mkdir(parents=True)
        log.write_text(json.dumps({"event": "done", "step": 1}) + "\n")
    lines = mbc.planning.banner.banner_lines(cfg, cores=2, measure=False, dry_run=True)
    assert "(nothing to train, so no device chosen)" in lines[0], lines[0]
    assert " on auto" not in lines[0] and f"{len(cfg.specs)} trained, 0 to train" in lines[1]


def test_more_threads_than_cores_is_one_line_and_dense_every_0_is_said(tmp_path):
    import os

    # checked in `onstart`, where the executor is known: before any job, not under -n (a
    # repair, while the Snakefile is parsed, comes before it)
    res = snakemake("all", *smoke_args(tmp_path / "a"), "threads=1000", check=False)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1] == (
        f"mbc: config key 'threads' = 1000: more than this machine's {os.cpu_count()} cores "
        "(threads per training job)"
    )
    res = snakemake(
        "-n", "all", *smoke_args(tmp_path / "b"), 'defaults={"eval": {"dense_every": 0}}'
    )
    assert (
        f"eval.dense_every is 0 for {N_SMOKE} run(s): their tau and every onset are located to"
        in (res.stderr)
    )


def _nothing_left(out) -> None:
    res = _tables(out, "-n")
    assert "Nothing to be done" in res.stdout + res.stderr, (res.stdout + res.stderr)[-2000:]


def test_a_torn_last_log_line_is_ignored(smoke, tmp_path):
    """A job killed mid-write leaves half a line at the end of log.jsonl: it is dropped, the
    run stays finished (the banner, mbc.status), and nothing is rebuilt."""
    from mbc.core.journal import finished, read_journal

    out = _copy(smoke, tmp_path)
    run = pd.read_csv(smoke / "tau.csv").run_id.iloc[0]
    log = out / "runs" / run / "state" / "log.jsonl"
    with open(log, "a") as fh:
        fh.write('{"step": 999, "candidate_lo')
    assert finished(read_journal(log))
    res = _tables(out, "-n")
    said = res.stdout + res.stderr
    assert f"mbc: {N_SMOKE} distinct runs: {N_SMOKE} trained, 0 to train" in said, said[-2000:]
    assert "Nothing to be done" in said and "mbc: repair" not in said, said[-2000:]
    status = subprocess.run(
        [sys.executable, "-m", "mbc.status", "--preset", "smoke", "--outdir", str(out)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    (line,) = [x for x in status.stdout.splitlines() if x.endswith(run)]
    assert line.split()[0] == "done", line


def test_a_corrupt_summary_is_rebuilt_in_one_rerun(smoke, tmp_path):
    """summary.json replaced by a half-written JSON, in one run with its checksum sidecar and
    in another without (an outdir from before sidecars): both are found at start-up and
    rebuilt by one rerun (it took two: the job reading it moved it aside and failed)."""
    out = _copy(smoke, tmp_path)
    runs = pd.read_csv(smoke / "tau.csv").drop_duplicates("run_id").run_id.iloc[:2]
    summaries = [out / "runs" / r / "summary.json" for r in runs]
    for path in summaries:
        path.write_text('{"run_id": "x", "tau": ')
    summaries[1].with_name("summary.json.sha256").unlink()
    said = (res := _tables(out)).stdout + res.stderr
    assert f"{summaries[0]}: differs from the checksum written with it" in said, said[-3000:]
    assert f"{summaries[1]}: not valid JSON" in said, said[-3000:]
    _equal_tables(out, smoke)
    _nothing_left(out)


def test_a_corrupt_resume_point_is_said_and_the_run_retrains_from_step_0(smoke, tmp_path):
    """A run cut back to its first resume point (its log ends there, as after a kill) whose
    resume.pt is then emptied: the console says so in one line, the run trains again from
    step 0, and its metrics and every table equal the clean run's (CPU: bitwise)."""
    out = _copy(smoke, tmp_path)
    tau = pd.read_csv(smoke / "tau.csv")
    run = tau[tau.experiment == "E1"].run_id.iloc[0]
    state = out / "runs" / run / "state"
    lines = (state / "log.jsonl").read_text().splitlines(keepends=True)
    first = next(i for i, x in enumerate(lines) if '"event": "resume"' in x)
    (state / "log.jsonl").write_text("".join(lines[: first + 1]))
    (state / "resume.pt").write_bytes(b"")
    (out / "runs" / run / "metrics.csv").unlink()
    said = (res := _tables(out)).stdout + res.stderr
    assert f"mbc: {N_SMOKE} distinct runs: {N_SMOKE - 1} trained, 1 to train" in said, said[-3000:]
    warned = [x for x in said.splitlines() if x.startswith("WARNING:") and "resume.pt" in x]
    assert len(warned) == 1 and warned[0].endswith("starting this run from step 0"), said[-3000:]
    metrics = [pd.read_csv(d / "runs" / run / "metrics.csv") for d in (out, smoke)]
    wall = [c for c in metrics[0].columns if c.startswith("wall")]
    pd.testing.assert_frame_equal(*(m.drop(columns=wall) for m in metrics), check_exact=True)
    _equal_tables(out, smoke)


@pytest.mark.parametrize("key", ["max_steps", "batch_size"])
def test_a_whole_number_float_for_an_integer_is_one_line_before_any_repair(tmp_path, key):
    """`max_steps: 300.0` passed Draft 2020-12's integer type, gave runs new ids, let the
    start-up repair delete an altered table, and only then crashed in the banner: now one
    line naming the key, and nothing under the outdir is touched."""
    out = tmp_path / "out"
    out.mkdir()
    table = out / "tau.csv"
    table.write_text("run_id\nr\n")
    (out / "tau.csv.sha256").write_text("0" * 64 + "\n")  # the repair would delete it
    conf = tmp_path / "floats.yaml"
    conf.write_text(f"defaults:\n  train:\n    {key}: 16.0\n")
    res = snakemake("all", "--configfile", str(conf), *smoke_args(out), check=False)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert res.stderr.strip().splitlines()[-1] == (
        f"mbc: config key 'defaults.train.{key}' = 16.0: must be an integer: write 16, "
        "not 16.0 (config)"
    )
    assert table.read_text() == "run_id\nr\n", "nothing repaired before the config is valid"


def test_wrong_typed_rate_caches_are_discarded_with_one_line_and_measured_again(
    tmp_path, monkeypatch, capsys
):
    """The outdir's `.mbc/steps_per_s.json` not a mapping, and the machine's rate cache
    with a string where a rate belongs: each is one line and measured again (they were a
    TypeError / ValueError traceback from the banner, after the start-up repair)."""
    import json

    import torch
    from helpers import tiny_spec

    import mbc.planning.timing
    from mbc.core.provenance import cpu_model
    from mbc.planning import banner
    from mbc.planning.cost import shape_key

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(mbc.planning.timing, "measure_steps_per_s", lambda *a, **k: 123.0)
    spec = tiny_spec()
    key = f"cpu|1|{shape_key(spec)}|step {banner.step_code_id()}"
    machine = banner.machine_rates()
    machine.parent.mkdir(parents=True)
    machine.write_text(json.dumps({f"{cpu_model()}|torch {torch.__version__}|{key}": "fast"}))
    cache = tmp_path / "out" / ".mbc" / "steps_per_s.json"
    cache.parent.mkdir(parents=True)
    cache.write_text("[1, 2]")
    assert banner.cached_rate(spec, "cpu", 1, cache) == 123.0
    said = capsys.readouterr().err.splitlines()
    assert said == [
        f"mbc: {cache}: not a mapping of rates, discarded (measured again)",
        f"mbc: {machine}: 1 entry(ies) not a steps/s number (such as 'fast'), discarded "
        "(measured again)",
    ]
    assert json.loads(cache.read_text()) == {key: 123.0}, "rewritten with the new measurement"
    assert banner.cached_rate(spec, "cpu", 1, cache) == 123.0 and not capsys.readouterr().err


def test_a_wrong_typed_calibration_cache_is_discarded_with_one_line_and_calibrated_again(
    tmp_path, monkeypatch, capsys
):
    """The machine's calibration cache (`mbc.estimate`'s calibration runs) not a mapping, or
    with an entry that is not a [tau, crossed] pair: one line, and the run is calibrated
    again and written back (such entries were dropped without a word)."""
    import json

    from helpers import tiny_spec

    import mbc.estimate
    from mbc.planning import banner

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    calls = []
    monkeypatch.setattr(mbc.estimate, "calibrate_tau", lambda *a: calls.append(a) or (40, True))
    spec = tiny_spec()
    cache = banner.calibration_cache()
    cache.parent.mkdir(parents=True)
    cache.write_text("[1, 2]")
    assert mbc.estimate.cached_calibration(spec, "cpu", 60.0) == (40, True)
    assert capsys.readouterr().err.splitlines() == [
        f"mbc: {cache}: not a mapping of calibrations, discarded (calibrated again)"
    ]
    key = f"{spec.run_id}|cpu|60|eager"
    cache.write_text(json.dumps({key: ["40", True], "other|cpu|60": [12, False]}))
    assert mbc.estimate.cached_calibration(spec, "cpu", 60.0) == (40, True)
    assert capsys.readouterr().err.splitlines() == [
        f"mbc: {cache}: 1 entry(ies) not a [tau, crossed] pair (such as ['40', True]), "
        "discarded (calibrated again)"
    ]
    assert len(calls) == 2, "calibrated again each time"
    assert json.loads(cache.read_text()) == {"other|cpu|60": [12, False], key: [40, True]}
    assert mbc.estimate.cached_calibration(spec, "cpu", 60.0) == (40, True)
    assert len(calls) == 2 and not capsys.readouterr().err, "then read from the cache"


def _measured(out, dest) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "mbc.measured",
        "--preset",
        "smoke",
        "--outdir",
        str(out),
        "--dest",
        str(dest),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)


def test_measured_refuses_an_outdir_that_is_not_complete_and_intact(smoke, tmp_path):
    """A run folder deleted, then a table's checksum deleted: `python -m mbc.measured` says
    what is missing in one line and writes no report (it wrote the report meant for
    committing, saying the missing run "was trained before provenance was logged")."""
    out, dest = _copy(smoke, tmp_path), tmp_path / "measured"
    run = pd.read_csv(smoke / "tau.csv").run_id.iloc[0]
    shutil.rmtree(out / "runs" / run)
    res = _measured(out, dest)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"mbc.measured: {out}/ is not complete and intact, nothing written: ")
    assert f"run {run}: its directory {out / 'runs' / run} is missing" in line, line
    assert not dest.exists()
    shutil.copytree(smoke / "runs" / run, out / "runs" / run)
    (out / "statistics.csv.sha256").unlink()
    (line,) = (res := _measured(out, dest)).stderr.strip().splitlines()
    assert res.returncode != 0 and f"{out}/statistics.csv has no checksum beside it" in line
    assert not dest.exists()
    shutil.copyfile(smoke / "statistics.csv.sha256", out / "statistics.csv.sha256")
    hyp = _copy_in_from_another_outdir(out, tmp_path / "other")
    (line,) = (res := _measured(out, dest)).stderr.strip().splitlines()
    assert res.returncode != 0 and f"{hyp} was built from a statistics.csv other than" in line
    assert not dest.exists()
    for name in ("hypotheses.csv", "hypotheses.csv.sha256"):
        shutil.copyfile(smoke / name, out / name)
    assert _measured(out, dest).returncode == 0 and (dest / "smoke" / "PROVENANCE").is_file()


_HOLD_RUN = """
import sys, time
sys.path.insert(0, sys.argv[2])
from helpers import tiny_spec
from mbc.training.record import RunRecord
held = RunRecord(tiny_spec(), sys.argv[1], say=lambda m: None)
held.resume()
print("held", flush=True)
time.sleep(600)
"""


def test_a_run_in_training_refuses_a_second_writer_reached_by_another_path(tmp_path):
    """Two processes on one run, the second through a symlinked outdir (Snakemake's lock
    compares paths as written: both invocations ran and rewrote one log): the second
    refuses in one line before it writes anything; the outdir lock holds through the link
    too. Once the first ends, the run resumes."""
    from helpers import tiny_spec

    from mbc.core.run_lock import RunBusyError
    from mbc.training.record import RunRecord
    from mbc.workflow.outdir_hold import hold_outdir

    out, link = tmp_path / "out", tmp_path / "link"
    run = out / "runs" / "r"
    link.symlink_to(out, target_is_directory=True)
    with _held(_HOLD_RUN, run, REPO / "tests") as holder:
        log = run / "state" / "log.jsonl"
        before = log.read_bytes()
        second = RunRecord(tiny_spec(), link / "runs" / "r", say=lambda m: None)
        with pytest.raises(RunBusyError) as exc:
            second.resume()
        assert str(exc.value).startswith(f"{run.resolve()}: process {holder.pid} on ")
        assert "\n" not in str(exc.value) and log.read_bytes() == before
        with _held(
            "import sys, time; from mbc.workflow.outdir_hold import hold_outdir; "
            "print(hold_outdir(sys.argv[1]), flush=True); time.sleep(600)",
            out,
            ready="True",
        ):
            assert not hold_outdir(link), "the outdir lock holds whatever path reached it"
    again = RunRecord(tiny_spec(), link / "runs" / "r", say=lambda m: None)
    again.resume()  # released with its holder
    again.close()


_JOB = """
import errno, sys
from mbc.core.artifacts import CorruptArtifactError, write_text_atomic
from mbc.workflow.job_log import logged
with logged(sys.argv[1]):
    print("a job's own output")
    if sys.argv[2] == "corrupt":
        raise CorruptArtifactError(f"{sys.argv[3]}: snapshot checksum mismatch", sys.argv[3])
    if sys.argv[2] == "interrupt":
        raise KeyboardInterrupt
    if sys.argv[2] == "enospc":
        raise OSError(errno.ENOSPC, "No space left on device", sys.argv[3])
"""


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        (
            "corrupt",
            "mbc: corrupt input detected: {bad}: snapshot checksum mismatch; moved {bad} "
            "aside to snap.pt.corrupt-",
        ),
        (
            "interrupt",
            "mbc: interrupted; a run resumes from its last resume point at the next snakemake",
        ),
        ("enospc", "mbc: no space left on the device writing {bad}: free some and rerun"),
    ],
)
def test_a_known_fault_in_a_job_is_one_line_with_its_traceback_in_the_log(tmp_path, fault, said):
    """A corrupt snapshot found inside a job, Ctrl-C, a full disk: the console gets the
    job's output and one line (it got the line and two tracebacks); the job's log keeps
    the traceback (`mbc.status` reads a failed job there), and the job fails."""
    bad, log = tmp_path / "snap.pt", tmp_path / "job.log"
    bad.write_bytes(b"x")
    res = subprocess.run(
        [sys.executable, "-c", _JOB, str(log), fault, str(bad)], capture_output=True, text=True
    )
    assert res.returncode == 1, res.stderr
    assert res.stdout == "", "a job's own output goes to its log, not the console"
    assert "a job's own output" in log.read_text()
    (line,) = res.stderr.splitlines()
    assert line.startswith(said.format(bad=bad)), line
    assert "Traceback (most recent call last)" in log.read_text()
    assert (not bad.exists()) == (fault == "corrupt"), "only a corrupt input is moved aside"


def test_an_outdir_lock_that_is_a_directory_is_one_line_before_any_repair(tmp_path):
    """`.mbc/outdir.lock` a directory: one line naming it (it was an IsADirectoryError
    traceback), and the table the repair would delete is still there."""
    out = tmp_path / "out"
    (out / ".mbc" / "outdir.lock").mkdir(parents=True)
    (out / "tau.csv").write_text("run_id\nr\n")
    (out / "tau.csv.sha256").write_text("0" * 64 + "\n")  # the repair would delete it
    res = snakemake("all", *smoke_args(out), check=False)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert res.stderr.strip().splitlines()[-1] == (
        f"mbc: {out / '.mbc' / 'outdir.lock'} cannot be the outdir's lock (a directory): "
        "remove it and run again"
    )
    assert (out / "tau.csv").read_text() == "run_id\nr\n"


def test_an_unwritable_compile_cache_falls_back_to_a_temporary_one(tmp_path, monkeypatch, capsys):
    """TORCHINDUCTOR_CACHE_DIR that cannot be written to (here under /sys, which refuses
    even root): the job compiles in a temporary cache, said in one line (every compiled
    training job died in Inductor with a traceback)."""
    import os

    from mbc.training.compile_cache import use_outdir_compile_cache

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/sys/kernel/mbc-test-compile-cache")
    use_outdir_compile_cache(tmp_path / "out" / "runs" / "r")
    scratch = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    assert scratch != "/sys/kernel/mbc-test-compile-cache" and Path(scratch).is_dir()
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("mbc: torch compile cache /sys/kernel/mbc-test-compile-cache cannot")
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    use_outdir_compile_cache(tmp_path / "out" / "runs" / "r")  # the outdir's, writable
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "out" / ".mbc" / "torch_compile")


def test_tex_output_in_another_encoding_is_read_not_a_traceback(tmp_path, monkeypatch):
    """latexmk writes paths as bytes (a non-Latin outdir in Latin-1, say): its output was
    decoded as UTF-8 and the paper job died in a UnicodeDecodeError; now its failure is
    reported with the output, undecodable bytes replaced."""
    from mbc import report_pipeline

    fake = tmp_path / "bin" / "latexmk"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nprintf 'cannot open /tmp/r\\351sultats/main.tex\\n'\nexit 12\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    with pytest.raises(RuntimeError, match="latexmk failed \\(12\\)") as exc:
        report_pipeline.compile_paper(tmp_path / "main.tex", [], tmp_path / "main.pdf")
    assert "cannot open /tmp/r\ufffdsultats/main.tex" in str(exc.value)


def test_eval_every_0_and_a_configfile_error_are_blamed_on_what_was_written(tmp_path):
    """`eval.every: 0` with dense_every set was reported against dense_every ("must divide
    eval.every = 0"); a value from `--configfile FILE` was blamed on `--config`."""
    from mbc.core.config_references import command_line_origin

    conf = tmp_path / "bad.yaml"
    conf.write_text("defaults:\n  eval:\n    every: 0\n")
    res = snakemake(
        "-n", "all", "--configfile", str(conf), *smoke_args(tmp_path / "o"), check=False
    )
    assert res.stderr.strip().splitlines()[-1] == (
        f"mbc: config key '--configfile {conf}: defaults.eval.every' = 0: must be a positive "
        "multiple of eval.dense_every = 5 (or set eval.dense_every: 0)"
    )
    path = ("defaults", "eval", "every")
    argv = ["snakemake", "--configfile", str(conf), "--config", "defaults={}", "outdir=x"]
    assert command_line_origin(path, argv) == "--config", "--config is merged last: it wins"
    assert command_line_origin(path, argv[:3] + ["--config", "outdir=x"]).startswith("--configfile")


def test_a_dataset_file_names_its_identity_and_a_swapped_one_is_refused(tmp_path):
    """Another dataset's file copied over this one's together with its sidecar passes the
    checksum; the dataset id the file and its sidecar record does not."""
    from helpers import tiny_spec

    from mbc.core.artifacts import CorruptArtifactError, read_sidecar
    from mbc.runs_pipeline import load_dataset, make_dataset

    a, b = tiny_spec(), tiny_spec(n_groups=13)
    pa, pb = (tmp_path / f"{s.dataset_id}.pt" for s in (a, b))
    make_dataset(a.task, a.seed, pa)
    make_dataset(b.task, b.seed, pb)
    assert read_sidecar(pa)[1] == a.dataset_id and load_dataset(pa).task == a.task
    shutil.copyfile(pb, pa)
    shutil.copyfile(f"{pb}.sha256", f"{pa}.sha256")
    with pytest.raises(
        CorruptArtifactError, match=f"holds dataset {b.dataset_id}, not {a.dataset_id}"
    ):
        load_dataset(pa)


def _least_used_dataset(out) -> tuple[Path, Path]:
    """(the dataset file fewest runs train on, another dataset's file)."""
    from collections import Counter

    import mbc.config as mbc_config

    cfg = mbc_config.load(
        mbc_config.read_yaml(str(REPO / "config.yaml")), {"preset": "smoke", "outdir": str(out)}
    )
    uses = Counter(s.dataset_id for s in cfg.specs.values())
    (least, _), (other, _) = sorted(uses.items(), key=lambda kv: (kv[1], kv[0]))[:2]
    return out / "datasets" / f"{least}.pt", out / "datasets" / f"{other}.pt"


def test_swapped_files_with_their_checksums_and_a_table_without_one_are_not_trusted(
    smoke, tmp_path
):
    """A dataset replaced by another's file with that file's sidecar (6 runs retrained on
    the wrong data, rc 0), a run's metrics.csv replaced by another run's with its sidecar,
    and tau.csv edited with its sidecar deleted (the edit spread to every table, rc 0):
    each is found at start-up, moved aside and rebuilt; the tables equal the clean run's."""
    out = _copy(smoke, tmp_path)
    dataset, other = _least_used_dataset(out)
    shutil.copyfile(other, dataset)
    shutil.copyfile(f"{other}.sha256", f"{dataset}.sha256")
    runs = pd.read_csv(smoke / "tau.csv").drop_duplicates("run_id").run_id
    metrics, theirs = (out / "runs" / r / "metrics.csv" for r in runs.iloc[:2])
    shutil.copyfile(theirs, metrics)
    shutil.copyfile(f"{theirs}.sha256", f"{metrics}.sha256")
    tau = pd.read_csv(out / "tau.csv")
    tau.loc[0, "tau"] = tau.loc[0, "tau"] + 1000
    tau.to_csv(out / "tau.csv", index=False)
    (out / "tau.csv.sha256").unlink()
    said = (res := _tables(out)).stdout + res.stderr
    assert f"{dataset}: holds dataset {other.stem}, by the checksum copied in with it" in said, (
        said[-3000:]
    )
    assert f"{metrics}: is runs/{runs.iloc[1]}/metrics.csv, by the checksum copied in" in said
    assert f"{out}/tau.csv: no checksum beside it (unverified), moved aside to" in said
    _equal_tables(out, smoke)
    _nothing_left(out)


def _copy_in_from_another_outdir(out: Path, other: Path) -> Path:
    """hypotheses.csv with its sidecar from another outdir, written there as its rule
    writes it (`built_from` that outdir's statistics.csv, whose values differ), copied over
    this outdir's: its sidecar names it rightly, its verdicts are not this outdir's."""
    from mbc.core.artifacts import built_from, write_csv_atomic

    stats = pd.read_csv(out / "statistics.csv")
    stats["value"] = stats["value"] * 2
    write_csv_atomic(other / "statistics.csv", stats)
    hyp = pd.read_csv(out / "hypotheses.csv")
    hyp["verdict"] = "falsified"
    with built_from([other / "statistics.csv"]):
        write_csv_atomic(other / "hypotheses.csv", hyp)
    for name in ("hypotheses.csv", "hypotheses.csv.sha256"):
        shutil.copyfile(other / name, out / name)
    return out / "hypotheses.csv"


def test_a_table_from_another_outdir_is_rebuilt_and_the_tables_equal_a_clean_runs(smoke, tmp_path):
    """hypotheses.csv copied in from another outdir with its sidecar (its identity matched:
    the other outdir's verdicts were trusted, rc 0): the start-up check finds the inputs its
    sidecar names are not this outdir's, moves it aside, and the DAG rebuilds it alone."""
    out = _copy(smoke, tmp_path)
    hyp = _copy_in_from_another_outdir(out, tmp_path / "other")
    said = (res := _tables(out)).stdout + res.stderr
    assert (
        f"mbc: repair: {hyp}: was built from a statistics.csv other than this outdir's, by its "
        "checksum, moved aside to hypotheses.csv.corrupt-" in said
    ), said[-3000:]
    for kept in ("statistics.csv", "scorecard.csv"):  # nothing else rebuilt
        assert (out / kept).stat().st_mtime_ns == (smoke / kept).stat().st_mtime_ns, kept
    _equal_tables(out, smoke)
    _nothing_left(out)


def test_a_damaged_line_in_a_finished_runs_log_is_kept_aside_and_the_run_trains_on(smoke, tmp_path):
    """A line of garbage in the middle of a finished run's log: the banner counted the run
    "to train" while nothing trained, and a resume rewrote the log. Now the start-up says
    so and the run trains on from its resume point before the damage, the damaged log kept
    aside; its metrics and every table equal the clean run's."""
    out = _copy(smoke, tmp_path)
    tau = pd.read_csv(smoke / "tau.csv")
    run = tau[tau.experiment == "E1"].run_id.iloc[0]
    log = out / "runs" / run / "state" / "log.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    first = next(i for i, x in enumerate(lines) if '"event": "resume"' in x)
    damaged = "".join([*lines[: first + 1], "garbage\n", *lines[first + 1 :]])
    log.write_text(damaged)
    said = (res := _tables(out)).stdout + res.stderr
    assert (
        f"mbc: repair: {log}: line {first + 2} of {len(lines) + 1} is not JSON: the run trains "
        "on from its last resume point before it" in said
    ), said[-3000:]
    assert f"mbc: {N_SMOKE} distinct runs: {N_SMOKE - 1} trained, 1 to train" in said, said[-3000:]
    warned = [x for x in said.splitlines() if x.startswith(f"WARNING: {log}: line")]
    assert len(warned) == 1 and "the log as it was is kept as log.jsonl.corrupt-" in warned[0]
    (aside,) = log.parent.glob("log.jsonl.corrupt-*")
    assert aside.read_text() == damaged, "nothing lost"
    metrics = [pd.read_csv(d / "runs" / run / "metrics.csv") for d in (out, smoke)]
    wall = [c for c in metrics[0].columns if c.startswith("wall")]
    pd.testing.assert_frame_equal(*(m.drop(columns=wall) for m in metrics), check_exact=True)
    _equal_tables(out, smoke)


def test_latex_without_a_writable_temporary_directory_works_beside_the_pdf(tmp_path, monkeypatch):
    """TMPDIR that cannot be written to: LaTeX's scratch directory goes beside the PDF and is
    removed after (it was a FileNotFoundError traceback from tempfile)."""
    import tempfile

    from mbc import report_pipeline

    fake = tmp_path / "bin" / "latexmk"
    fake.parent.mkdir()
    fake.write_text(
        '#!/bin/sh\nfor a; do case "$a" in -output-directory=*) d="${a#*=}";; esac; '
        'done\necho pdf > "$d/main.pdf"; echo log > "$d/main.log"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    monkeypatch.setattr(tempfile, "tempdir", "/sys/kernel/mbc-test-tmp")
    pdf = tmp_path / "paper" / "main.pdf"
    report_pipeline.compile_paper(tmp_path / "main.tex", [], pdf)
    assert pdf.read_text() == "pdf\n" and sorted(p.name for p in pdf.parent.iterdir()) == [
        "main.log",
        "main.pdf",
        "main.pdf.sha256",  # what it was built from (mbc.core.built_by.pdf_stale)
    ], "the scratch directory is removed"


def test_a_damaged_log_is_found_and_kept_aside_a_torn_last_line_is_not(tmp_path):
    from mbc.core.journal import damage, keep_damaged

    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 0}\n{"step": 10}\n{"step": 2')  # torn last line: a kill
    assert damage(log) is None and keep_damaged(log) is None
    log.write_bytes(b'{"step": 0}\n\xff\xfe garbage\n{"step": 10}\n')
    assert damage(log) == (2, 3)
    said = keep_damaged(log)
    (aside,) = tmp_path.glob("log.jsonl.corrupt-*")
    assert said == (
        f"{log}: line 2 of 3 is not JSON; the log as it was is kept as {aside.name}, and the "
        "run goes on from its last resume point before that line"
    )
    assert aside.read_bytes() == log.read_bytes()


def test_the_fault_table_names_tests_that_exist():
    """docs/reliability-faults.md names a test for every row: each one is defined here."""
    import re

    doc = (REPO / "docs" / "reliability-faults.md").read_text()
    named = set(re.findall(r"`(test_\w+)`", doc))
    defined = set(re.findall(r"^def (test_\w+)", Path(__file__).read_text(), re.M))
    assert named and named <= defined, named - defined


def test_a_kill_between_the_last_resume_point_and_done_does_not_train_past_the_early_stop(
    tmp_path,
):
    """An early-stopped run whose `done` line was lost (killed after its resume point at
    the stop step, or cut there by a damaged log): resumed, it trained on past its early
    stop and its tables changed; now it finishes where it stopped."""
    import dataclasses

    import torch
    from helpers import tiny_spec

    from mbc.training.data import build_dataset
    from mbc.training.train import train_run

    spec = tiny_spec()
    spec = dataclasses.replace(
        spec, train=dataclasses.replace(spec.train, early_stop_tau_factor=2.0, max_steps=400)
    )
    ds = build_dataset(spec.task, spec.seed)
    ref = train_run(spec, ds, tmp_path / "ref", torch.device("cpu"), say=lambda m: None)
    assert ref.step.iloc[-1] < spec.train.max_steps, "the early stop ended it"
    run = tmp_path / "cut"
    shutil.copytree(tmp_path / "ref", run)
    log = run / "state" / "log.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    assert '"event": "resume"' in lines[-2] and '"event": "done"' in lines[-1]
    log.write_text("".join(lines[:-1]))
    got = train_run(spec, ds, run, torch.device("cpu"), say=lambda m: None)
    pd.testing.assert_frame_equal(got.drop(columns=["wall_s"]), ref.drop(columns=["wall_s"]))


def test_an_invocation_through_a_symlink_cannot_resume_a_run_in_training(smoke, tmp_path):
    """A run being trained (its lock held, as by the first invocation's training job) and
    a second `snakemake` reaching the outdir through a symlink: its job for that run stops
    in one line and leaves the run's log as it was; once the first ends, a rerun gives
    tables equal to the clean run's."""
    out = _copy(smoke, tmp_path)
    link = tmp_path / "link"
    link.symlink_to(out, target_is_directory=True)
    tau = pd.read_csv(smoke / "tau.csv")
    run = tau[tau.experiment == "E1"].run_id.iloc[0]
    state = out / "runs" / run / "state"
    lines = (state / "log.jsonl").read_text().splitlines(keepends=True)
    first = next(i for i, x in enumerate(lines) if '"event": "resume"' in x)
    (state / "log.jsonl").write_text("".join(lines[: first + 1]))  # killed after a resume point
    (out / "runs" / run / "metrics.csv").unlink()
    with _held(
        "import sys, time; from mbc.core.run_lock import hold; h = hold(sys.argv[1]); "
        "print('held', flush=True); time.sleep(600)",
        state,
    ) as holder:
        before = (state / "log.jsonl").read_bytes()
        res = _tables(link, check=False)
        said = res.stdout + res.stderr
        assert res.returncode != 0, said[-3000:]
        refused = [x for x in said.splitlines() if x.startswith(f"mbc: {out / 'runs' / run}:")]
        assert len(refused) == 1 and f"process {holder.pid} on " in refused[0], said[-3000:]
        assert "Traceback" not in said and (state / "log.jsonl").read_bytes() == before
    _tables(link)
    _equal_tables(out, smoke)


def test_two_invocations_on_one_outdir_through_a_symlink_one_runs_and_tables_equal(smoke, tmp_path):
    """Two `snakemake` on one outdir, the second through a symlink, while the first repairs
    and retrains: the second stops in one line before it repairs or runs anything (the
    outdir lock, taken before the first's repair, while its Snakefile is parsed, holds
    whatever path reached it until the first ends); the first ends with the clean run's
    tables."""
    out = _copy(smoke, tmp_path)
    link = tmp_path / "link"
    link.symlink_to(out, target_is_directory=True)
    tau = pd.read_csv(smoke / "tau.csv")
    for run in tau[tau.experiment == "E1"].run_id:  # retrained from step 0: the first is busy
        shutil.rmtree(out / "runs" / run / "state")
        (out / "runs" / run / "metrics.csv").unlink()
    targets = [str(out / f"{t}.csv") for t in TABLES]
    first = subprocess.Popen(
        [snakemake_exe(), "--cores", "1", *targets, *smoke_args(out)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    said = []
    for line in first.stdout:  # until the first holds the outdir and has repaired
        said.append(line)
        if line.startswith("mbc: repair:") and "derived file(s) deleted" in line:
            break
    second = snakemake(*(str(link / f"{t}.csv") for t in TABLES), *smoke_args(link), check=False)
    said += first.stdout.readlines()
    assert first.wait() == 0, "".join(said)[-3000:]
    assert second.returncode != 0 and "Traceback" not in second.stderr, second.stderr[-3000:]
    assert second.stderr.strip().splitlines()[-1] == (
        f"mbc: another snakemake is running on {link}/: nothing repaired or run here; wait "
        "for it to end"
    )
    assert "mbc: repair:" not in second.stderr
    _equal_tables(out, smoke)
    _nothing_left(link)


def _trained_run(root: Path, diagnostics: list[Path] | None = None):
    """A run of `root` as its training leaves it: its dataset and its train tables (each
    with its sidecar), no summary yet; `diagnostics`: the paths its diagnostics would have."""
    from mbc.core.artifacts import write_csv_atomic
    from mbc.workflow.integrity import RunFiles

    run = root / "runs" / "r"
    dataset = root / "datasets" / "d.pt"
    dataset.parent.mkdir(parents=True)
    dataset.write_bytes(b"a dataset")
    files = RunFiles(
        "r",
        dataset,
        [run / "metrics.csv", run / "checkpoints.csv"],
        run / "summary.json",
        diagnostics or [],
    )
    write_csv_atomic(files.train[0], pd.DataFrame({"step": [0, 10]}))
    write_csv_atomic(files.train[1], pd.DataFrame({"step": [], "path": [], "sha256": []}))
    log = run / "state" / "log.jsonl"  # the log its tables were written from
    log.parent.mkdir(parents=True)
    log.write_text('{"event": "start", "step": 0}\n{"event": "done", "step": 10}\n')
    return files


def test_a_runs_table_whose_checksum_is_gone_is_unverified_when_its_siblings_have_one(tmp_path):
    """A run's summary.json edited and its sidecar deleted, while the run's other tables
    have theirs: the start-up check takes it as unverified and rebuilds it (it trusted
    it). A run whose tables all predate sidecars is not checked (nothing to compare)."""
    from mbc.core.artifacts import write_json_atomic
    from mbc.workflow.integrity import scan

    files = _trained_run(tmp_path)
    write_json_atomic(files.summary, {"run_id": "r", "tau": 30})
    assert scan([files], []) == []
    files.summary.write_text('{"run_id": "r", "tau": 3000}\n')
    Path(f"{files.summary}.sha256").unlink()
    (found,) = scan([files], [])
    assert (found.path, found.level, found.corrupt) == (files.summary, 2, True)
    assert found.why == "no checksum beside it, while the run's other tables have one (unverified)"
    for p in files.train:
        Path(f"{p}.sha256").unlink()
    assert scan([files], []) == [], "an outdir from before sidecars"


def test_a_trained_run_whose_later_links_are_still_to_come_is_no_finding(tmp_path):
    """A long run stopped and resumed: a trained run whose summary.json (or a diagnostic)
    its jobs have not built yet is no damage before the aggregated tables exist (they want
    it: Snakemake builds it), so the start-up neither says "repair" nor plans again. Once a
    table exists, the same absence is a finding (the table may be up to date without it)."""
    from mbc.core.artifacts import write_csv_atomic, write_json_atomic
    from mbc.workflow.integrity import scan

    diag = tmp_path / "diagnostics" / "hessian" / "r.csv"
    files = _trained_run(tmp_path, [diag])
    tau = tmp_path / "tau.csv"
    stacked_metrics = tmp_path / "metrics.csv"  # built from the train links alone
    write_csv_atomic(stacked_metrics, pd.DataFrame({"run_id": ["r"]}))
    assert scan([files], [tau, stacked_metrics]) == [], "trained, not summarised yet"
    write_json_atomic(files.summary, {"run_id": "r", "tau": 30})
    assert scan([files], [tau, stacked_metrics]) == [], "its diagnostic still to come"
    write_csv_atomic(tau, pd.DataFrame({"run_id": ["r"]}))
    (found,) = scan([files], [tau])
    assert (found.path, found.level, found.corrupt) == (diag, 3, False)
    files.summary.unlink()
    (found,) = scan([files], [tau])
    assert (found.path, found.level, found.corrupt) == (files.summary, 2, False)
    tau.unlink()
    diag.parent.mkdir(parents=True)
    write_csv_atomic(diag, pd.DataFrame({"step": [10]}))
    (found,) = scan([files], [tau])
    assert (found.path, found.level) == (files.summary, 2), "a diagnostic without its summary"


def test_a_damaged_training_log_table_is_rebuilt_with_the_runs_tables(tmp_path):
    """train_log.csv (the author's logged statistics read it) is no rule's output: a damaged
    one was moved aside by the job that read it and never rebuilt, so its run's statistics
    went unmeasured. The start-up check takes it as part of the train link: it is moved
    aside, and the run's tables go too, so that its job writes them all again from the
    run's log (which says the run finished: nothing is retrained)."""
    from mbc.core.artifacts import write_csv_atomic
    from mbc.workflow.integrity import repair, scan

    files = _trained_run(tmp_path)
    run = files.run_dir
    log_table = run / "train_log.csv"
    write_csv_atomic(log_table, pd.DataFrame({"step": [50], "candidate_loss_sampled": [1.0]}))
    assert scan([files], []) == [], "intact (its summary still to come)"
    log_table.write_text("step,candidate_loss_sampled\n50,0.5\n")  # edited
    (found,) = scan([files], [])
    assert (found.path, found.level, found.corrupt) == (log_table, 1, True)
    lines = repair([found], [files], [])
    assert not log_table.exists() and list(run.glob("train_log.csv.corrupt-*")), lines
    assert not any(p.exists() for p in files.train), "rebuilt with it, from the log"


def test_a_file_system_without_locks_trains_unguarded_and_says_so(tmp_path, monkeypatch, capsys):
    """flock refused by the file system (ENOLCK on some network mounts): the run trains and
    the start-up goes on, each saying in one line that a second writer is not refused
    (every job, and the start-up, failed there)."""
    import errno
    import fcntl

    from mbc.core import run_lock
    from mbc.workflow.outdir_hold import hold_outdir

    def no_locks(fh, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    fh = run_lock.hold(tmp_path / "state")
    run_lock.release(fh)
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"mbc: {tmp_path.resolve() / 'state' / 'run.lock'}: no file locks on this file system "
        "(No locks available): a second process on this run is not refused"
    )
    assert hold_outdir(tmp_path / "out"), "the start-up goes on, unguarded"
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("(No locks available): a second snakemake on this outdir is not detected")


def test_the_outdir_lock_is_probed_without_being_held(tmp_path):
    """An invocation that runs no jobs asks whether another holds the outdir (to stop before planning
    from files another one is changing, or to tell a stale Snakemake lock) and holds nothing
    itself; an invocation that runs jobs holds it (`take_outdir`)."""
    from mbc.workflow.outdir_hold import held_elsewhere, outdir_in_use

    out = tmp_path / "out"
    assert not outdir_in_use(out), "no lock file yet"
    lock = out / ".mbc" / "outdir.lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    assert not outdir_in_use(out)
    with _held(
        "import fcntl, sys, time; f = open(sys.argv[1], 'a'); "
        "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(600)",
        lock,
    ):
        assert outdir_in_use(out) and held_elsewhere(out)
    assert not outdir_in_use(out), "released with its holder; the probe kept nothing"
    assert not held_elsewhere(out)
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _planted_outdir(out: Path, tau: int) -> Path:
    """A run's hessian diagnostic, and the aggregated hessian.csv built from it by the
    `aggregate` rule's function."""
    from mbc.core.artifacts import write_csv_atomic
    from mbc.runs_pipeline import concat_tables

    diag = out / "diagnostics" / "hessian" / "r.csv"
    write_csv_atomic(diag, pd.DataFrame({"run_id": ["r"], "tau": [tau]}))
    concat_tables([diag], out / "hessian.csv")
    return out


def test_a_table_copied_in_from_another_outdir_with_its_checksum_is_not_trusted(tmp_path):
    """An aggregated table copied in from another outdir together with its sidecar: the
    sidecar named the table only, which matched, and the table was trusted. It names the
    inputs the table was built from too, by their checksums; those are the other outdir's:
    moved aside at start-up, so the DAG rebuilds it. A sidecar from before inputs were
    recorded (an outdir an older version is writing) is accepted as before; a table whose
    input changed after it is left to Snakemake, which reruns it for that input."""
    import os

    from mbc.core.artifacts import read_sidecar, sha256_file, write_csv_atomic
    from mbc.workflow.integrity import altered_tables, move_aside

    def move_altered_aggregates(outdir, dry_run=False, skip=()):
        """What the start-up does with the outdir's tables (startup.smk)."""
        return move_aside(altered_tables(outdir, skip), dry_run)

    here, there = _planted_outdir(tmp_path / "here", 30), _planted_outdir(tmp_path / "there", 3000)
    table, diag = here / "hessian.csv", here / "diagnostics" / "hessian" / "r.csv"
    assert read_sidecar(table).inputs == ((sha256_file(diag), "diagnostics/hessian/r.csv"),)
    assert move_altered_aggregates(here) == []
    for name in ("hessian.csv", "hessian.csv.sha256"):
        shutil.copyfile(there / name, here / name)
    assert move_altered_aggregates(here, dry_run=True) == [
        f"{table}: was built from a diagnostics/hessian/r.csv other than this outdir's, by its "
        "checksum, would be moved aside so that it is rebuilt"
    ]
    (line,) = move_altered_aggregates(here)
    (aside,) = here.glob("hessian.csv.corrupt-*")
    assert line.endswith(f"moved aside to {aside.name} so that it is rebuilt")
    assert not table.exists() and aside.read_bytes() == (there / "hessian.csv").read_bytes()
    # an input rebuilt after its table: Snakemake reruns the table (its input is newer)
    _planted_outdir(here, 30)
    write_csv_atomic(diag, pd.DataFrame({"run_id": ["r"], "tau": [31]}))
    os.utime(table, (1000, 1000))
    os.utime(diag, (2000, 2000))
    assert move_altered_aggregates(here, dry_run=True) == []
    os.utime(diag, (500, 500))
    assert len(move_altered_aggregates(here, dry_run=True)) == 1
    shutil.rmtree(here / "diagnostics")
    (line,) = move_altered_aggregates(here, dry_run=True)
    assert line.startswith(
        f"{table}: was built from diagnostics/hessian/r.csv, which this outdir does not have, "
        "by its checksum, would be moved aside"
    )
    assert move_altered_aggregates(here, dry_run=True, skip=[table]) == [], "the repair deletes it"
    # a missing input the workflow rebuilds from the runs (an aggregated table the repair
    # deleted, when a config change adds runs): rebuilt, then this table after it
    rebuilt = here / "diagnostics" / "hessian" / "r.csv"
    assert move_aside(altered_tables(here, rebuilt=[rebuilt]), dry_run=True) == []
    # the one-line sidecar an older version writes (into an outdir it may still be writing)
    write_csv_atomic(table, pd.DataFrame({"run_id": ["r"], "tau": [30]}))
    assert Path(f"{table}.sha256").read_text() == f"{sha256_file(table)}  hessian.csv\n"
    assert move_altered_aggregates(here) == []


def test_a_diagnostic_without_its_checksum_or_from_another_outdir_is_not_trusted(tmp_path):
    """A run's diagnostic table edited and its sidecar deleted, while the run's tables have
    theirs, was trusted (and the edit spread to the aggregated tables): it is unverified,
    moved aside and rebuilt, as a run's own tables are. One copied in from another outdir
    with its sidecar names inputs (the run's dataset, snapshot index, summary) that are not
    this outdir's. A run whose tables all predate sidecars is not checked (nothing to
    compare; its diagnostics are as old as its summary or older, and Snakemake reruns those)."""
    from helpers import planted_run

    from mbc.workflow.integrity import repair, scan

    files, theirs = planted_run(tmp_path / "here", 30), planted_run(tmp_path / "there", 3000)
    (diag,) = files.diagnostics
    assert scan([files], []) == []
    for suffix in ("", ".sha256"):
        shutil.copyfile(f"{theirs.diagnostics[0]}{suffix}", f"{diag}{suffix}")
    (found,) = scan([files], [])
    assert (found.path, found.level, found.corrupt) == (diag, 3, True)
    assert (
        found.why
        == "was built from a runs/r/summary.json other than this outdir's, by its checksum"
    )
    Path(f"{diag}.sha256").unlink()
    (found,) = scan([files], [])
    assert (found.path, found.level, found.corrupt) == (diag, 3, True)
    assert found.why == "no checksum beside it, while the run's other tables have one (unverified)"
    lines = repair([found], [files], [])
    (aside,) = diag.parent.glob("r.csv.corrupt-*")
    assert lines[0] == f"{diag}: {found.why}, moved aside to {aside.name}" and not diag.exists()
    aside.rename(diag)
    for p in (*files.train, files.summary):
        Path(f"{p}.sha256").unlink()
    assert scan([files], []) == [], "an outdir from before sidecars"


def test_every_derived_table_records_what_it_was_built_from():
    """Every table `mbc.runs_pipeline` and `mbc.report_pipeline` write from other files (a run's
    summary, its diagnostics, every aggregated table, the fits and verdicts) is written
    inside `built_from` its inputs, so that its sidecar names them; only a pack's manifest
    (a source: what its training did) is not."""
    import ast

    writes = {"write_csv_atomic", "write_json_atomic"}
    modules = [REPO / "src" / "mbc" / f"{m}.py" for m in ("runs_pipeline", "report_pipeline")]
    tree = ast.Module([n for m in modules for n in ast.parse(m.read_text()).body], [])

    def calls(node, names):
        return [
            n
            for n in ast.walk(node)
            if isinstance(n, ast.Call) and getattr(n.func, "id", None) in names
        ]

    bare = set()
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        bound = [
            w
            for n in ast.walk(fn)
            if isinstance(n, ast.With)
            if any(calls(i.context_expr, {"built_from"}) for i in n.items)
            for w in calls(n, writes)
        ]
        if len(bound) < len(calls(fn, writes)):
            bare.add(fn.name)
    assert bare == {"train_pack"}


def _a_finished_run(out) -> str:
    return next(p.name for p in sorted((out / "runs").iterdir()) if (p / "metrics.csv").exists())


def test_a_missing_train_log_is_rebuilt_from_the_runs_log_and_the_tables_equal(smoke, tmp_path):
    """Reliability round 3: a deleted train_log.csv was taken as "trained before the file
    existed" (tau_sampled NaN, a fit's n from 5 to 4). It is rebuilt from the log."""
    out = _copy(smoke, tmp_path)
    run = _a_finished_run(out)
    (out / "runs" / run / "train_log.csv").unlink()
    res = _tables(out)
    assert "train_log.csv: missing: rebuilt from the run's log" in res.stderr
    assert (out / "runs" / run / "train_log.csv").read_bytes() == (
        smoke / "runs" / run / "train_log.csv"
    ).read_bytes()
    _equal_tables(out, smoke)
    assert "to train" in res.stderr and f"{N_SMOKE} trained, 0 to train" in res.stderr


def test_a_missing_log_of_a_finished_run_retrains_it_and_the_banner_counts_it(smoke, tmp_path):
    """A finished run whose log.jsonl was deleted: the banner said "1 to train" and nothing
    trained. Its tables have no history left: it is trained again (bitwise the same)."""
    out = _copy(smoke, tmp_path)
    run = _a_finished_run(out)
    (out / "runs" / run / "state" / "log.jsonl").unlink()
    # (the tables alone: the figures and tex built from the old tau.csv are deleted by the
    # repair, stale, and a later `all` rebuilds them; --allowed-rules would refuse `all`'s
    # missing inputs even with other targets named)
    res = _tables(out)
    assert f"{N_SMOKE - 1} trained, 1 to train" in res.stderr
    assert "log.jsonl: missing beside the run's tables: the run is trained again" in res.stderr
    assert (out / "runs" / run / "state" / "log.jsonl").is_file()
    _equal_tables(out, smoke)
