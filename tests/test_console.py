"""A quiet, useful console: jobs' output goes to their logs (mbc.workflow.job_log), Snakemake's
per-job chatter to its log file (mbc.workflow.console), and the banner says what its time covers."""

import logging
import re
import sys
from pathlib import Path

import pytest

from mbc.workflow.console import QuietConsole, quiet_console
from mbc.workflow.job_log import console, logged

ROOT = Path(__file__).resolve().parents[1]


def test_a_jobs_prints_go_to_its_log_and_console_lines_to_both(tmp_path, capsys):
    log = tmp_path / "logs" / "job.log"
    with logged(log):
        print("{'a summary': 'dict'}")
        print("a pandas dump", file=sys.stderr)
        console("run-1: done at step 300")
    said = capsys.readouterr()
    assert "summary" not in said.out + said.err and "pandas" not in said.out + said.err
    assert said.err == "run-1: done at step 300\n"
    text = log.read_text()
    assert "a summary" in text and "a pandas dump" in text and "run-1: done at step 300" in text


def test_a_failing_job_names_its_log_on_the_console(tmp_path, capsys):
    log = tmp_path / "job.log"
    with pytest.raises(ValueError), logged(log):
        print("working")
        raise ValueError("bad input")
    said = capsys.readouterr()
    assert said.err == f"mbc: failed, the whole story is in {log}\n"
    assert "ValueError: bad input" in log.read_text()


def _record(msg, level=logging.INFO, event=None):
    rec = logging.LogRecord("snakemake.logging", level, __file__, 1, msg, None, None)
    if event is not None:
        rec.event = event
    return rec


def test_snakemakes_per_job_chatter_stays_off_the_console_but_errors_do_not():
    from snakemake_interface_logger_plugins.common import LogEvent

    f = QuietConsole()
    for event in (
        LogEvent.JOB_INFO,
        LogEvent.JOB_FINISHED,
        LogEvent.PROGRESS,
        LogEvent.RUN_INFO,
        LogEvent.JOB_STARTED,
        LogEvent.WORKFLOW_STARTED,
    ):
        assert not f.filter(_record("x", event=event)), event
    assert not f.filter(_record("Select jobs to execute..."))
    assert f.filter(_record("Error in rule train", logging.ERROR, LogEvent.JOB_ERROR))
    assert f.filter(_record("Nothing to be done (all requested files are present)."))
    assert f.filter(_record("Building DAG of jobs..."))


def test_the_filter_sits_on_the_console_handler_only(tmp_path):
    logger = logging.getLogger("mbc-test-console")
    stream, file = logging.StreamHandler(), logging.FileHandler(tmp_path / "x.log")
    logger.handlers = [stream, file]
    try:
        assert quiet_console(logger) == 1 and quiet_console(logger) == 1  # once, not twice
        assert [type(x) for x in stream.filters] == [QuietConsole] and not file.filters
    finally:
        file.close()
        logger.handlers = []


def test_the_banners_time_says_training_only_and_never_in_zero_seconds(tmp_path, monkeypatch):
    import mbc.config as mbc_config
    import mbc.planning.banner as banner

    cfg = mbc_config.load(
        mbc_config.read_yaml(str(ROOT / "config.yaml")),
        {"preset": "smoke", "outdir": str(tmp_path / "out")},
    )
    monkeypatch.setattr(banner, "cached_rate", lambda *a, **k: 100.0)  # a rate this machine cached
    (wall,) = [x for x in banner.banner_lines(cfg, cores=2, dry_run=True) if "wall time" in x]
    assert "training only" in wall and "measured earlier here" in wall
    assert " in 0.0 s" not in wall

    def timed_now(*a, say=None, **k):  # a rate measured by this call: it says so first
        say("timing 5 training steps")
        return 100.0

    monkeypatch.setattr(banner, "cached_rate", timed_now)
    (wall,) = [x for x in banner.banner_lines(cfg, cores=2, dry_run=True) if "wall time" in x]
    assert re.search(r"steps/s on the most common shape, measured in \d+\.\d s;", wall), wall


def test_under_a_deadline_the_wall_time_says_it_is_every_run_lefts(tmp_path, monkeypatch):
    """The timed line under `deadline=` names its scope: every run left, not the runs the
    deadline starts (its own line, at parse time, gives those)."""
    import mbc.config as mbc_config
    import mbc.planning.banner as banner

    cfg = mbc_config.load(
        mbc_config.read_yaml(str(ROOT / "config.yaml")),
        {"preset": "smoke", "outdir": str(tmp_path / "out")},
    )
    monkeypatch.setattr(banner, "cached_rate", lambda *a, **k: 100.0)
    lines = banner.banner_lines(cfg, cores=2, dry_run=True, deadline="1h30m")
    (wall,) = [x for x in lines if "wall time" in x]
    assert "for every run left (the deadline 1h30m starts only the runs it named)" in wall
    (plain,) = [x for x in banner.banner_lines(cfg, cores=2, dry_run=True) if "wall time" in x]
    assert "deadline" not in plain


def test_a_jobs_warning_lines_reach_the_console_too(tmp_path, capsys):
    log = tmp_path / "job.log"
    with logged(log):
        print("step 100: L_cand 0.5")
        print("WARNING: resume.pt is empty; starting this run from step 0")
    said = capsys.readouterr()
    assert said.err == "WARNING: resume.pt is empty; starting this run from step 0\n"
    assert "step 100" in log.read_text() and "WARNING: resume.pt" in log.read_text()


def test_a_jobs_lines_reach_its_log_as_they_are_said(tmp_path):
    """Someone watching a training job's log (`tail -f`) sees each progress line when it is
    printed, not when the job ends or a buffer fills."""
    log = tmp_path / "logs" / "job.log"
    with logged(log):
        print("pack step 200: 2 run(s) in this pack")
        assert log.read_text() == "pack step 200: 2 run(s) in this pack\n"
        print("pack step 400", end="")  # a partial line waits for its end
        print(": 2 run(s)")
        assert log.read_text().splitlines()[-1] == "pack step 400: 2 run(s)"
