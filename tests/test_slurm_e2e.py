"""End to end through a real single-node Slurm (started and stopped by the test itself).

test_smoke_through_slurm_equals_local
    The whole smoke preset runs to completion through profiles/slurm-test, every rule's
    every job inside a Slurm allocation (checked in the Slurm job logs), and its outputs
    are identical to a local `snakemake --cores 2` run of the same preset (the session's
    `smoke` fixture): every CSV table
    (minus the timing column `wall_s`), every run's summary.json, numbers.tex and the
    LaTeX tables. Figures (and the paper PDF, when TeX is installed) exist in both; PDFs
    embed timestamps, so they are not compared byte for byte.
test_scancelled_training_resumes_from_checkpoint
    One longer training run goes through Slurm. Once its job is RUNNING and has written a
    resume point (state/resume.pt plus its log.jsonl entry), it is `scancel`ed. The
    profile's `retries` resubmit it, the new job resumes ("resuming <id> from step N",
    N > 0), Snakemake exits 0, and metrics.csv / checkpoints.csv equal (minus wall_s)
    those of the same run trained locally without interruption: bitwise, on CPU.
test_test_profile_dag_is_valid
    A dry run of the smoke preset with profiles/slurm-test (no Slurm needed): catches a
    job-group definition that no longer fits the workflow in seconds.

Wall time. In plugin 2.8.0 each Slurm job costs two Snakemake start-ups (the batch job,
then the `srun` step inside it) on top of the rule, plus up to one status-poll interval, so
the smoke preset through Slurm is CPU-bound on 2 cores. What keeps it short, without
changing what runs (see profiles/slurm-test/config.yaml and profiles/SLURM_NOTES.md):
* the per-run chain dataset -> train -> summarize_run -> diagnostics is one Slurm group
  job per dataset (one start-up less per rule);
* the test node declares NODE_CPUS CPUs on a 2-core machine and the profile allows 8 jobs,
  so jobs waiting for start-up or for a status poll overlap instead of idling the cores;
* the local reference of the smoke preset is the session's `smoke` run (conftest), shared
  with test_workflow, so the preset runs locally once per test session;
* the preemption scenario (mostly waiting) runs in the background while the smoke runs
  go on. Its checks stay in its own test.
Wall times are printed (`pytest -s`); measured values are in profiles/SLURM_NOTES.md.

Skipped when the Slurm/munge binaries (or root, or the plugin) are missing, unless CI is
set: then the tests fail, because CI is expected to install them (setup.sh does).
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml
from helpers import last_resume_step, require_plugin, require_slurm, snakemake_exe
from slurm_cluster import local_slurm

import mbc.config

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[1]
TEST_PROFILE = REPO / "profiles" / "slurm-test"
# CPUs the test node declares: more than the machine has, on purpose (module docstring).
# Slurm believes it (SlurmdParameters=config_overrides); nothing enforces CPU binding. A
# group job asks for the CPUs of the jobs it could run side by side: smoke's most shared
# dataset carries 9 training runs (E1, E5, E6, E7, E7_30k, E11, E12, E14, E14_author at
# K = 3), so a node of 8 left that group pending for ever (Reason=PartitionConfig).
NODE_CPUS = 16
# Finished jobs stay visible to squeue this long; the checks below look at job states
# long after the jobs ended (the default, 300 s, is shorter than a smoke run).
MIN_JOB_AGE_S = 3600
# Upper bound for each Snakemake run: a hung run fails the test instead of blocking CI.
TIMEOUT_S = float(os.environ.get("MBC_SLURM_E2E_TIMEOUT", 2400))
# The interrupted run: E1's first configuration, long enough to be caught mid-run (early
# stopping off), with a resume point every 200 steps. It is scancelled right after the
# first one, so 800 steps (several seconds even on a fast CPU) are still to go.
PREEMPT_STEPS = 1000
PREEMPT_OVERRIDES = {
    "only": ["E1"],
    "defaults": {
        "train": {"max_steps": PREEMPT_STEPS, "early_stop_tau_factor": 0},
        "eval": {"resume_every": 200},
    },
}
TIMING_COLUMNS = ("wall_s",)
SUBMITTED = re.compile(r"has been submitted with SLURM jobid (\d+) \(log: (\S+?\.log)\)")


def _config_args(out: Path, **overrides) -> list[str]:
    """--config for the smoke preset into `out`; values are YAML to Snakemake (so nested
    dicts work: mbc.core.config_loader deep-merges them over the preset)."""
    items = {"preset": "smoke", **overrides, "outdir": str(out)}
    items["paper_pdf"] = f"{out}/paper/main.pdf"
    return ["--config"] + [
        f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in items.items()
    ]


class Run:
    """A snakemake started in the background; stdout+stderr go to `log`."""

    def __init__(self, args: list[str], log: Path, what: str):
        self.what, self.log = what, log
        self.wall: float | None = None
        self.t0 = time.monotonic()
        self._fh = open(log, "w")  # noqa: SIM115 - closed by stop()
        self.proc = subprocess.Popen(
            [snakemake_exe(), *args],
            cwd=REPO,
            env={**os.environ, "MBC_CONSOLE": "full"},  # the Job stats and job blocks read here
            stdout=self._fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        # Note when it ends even while nobody waits for it (runs overlap).
        self._reaper = threading.Thread(target=self._reap, daemon=True)
        self._reaper.start()

    def _reap(self) -> None:
        self.proc.wait()
        self.wall = time.monotonic() - self.t0

    def running(self) -> bool:
        return self.proc.poll() is None

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, n: int = 8000) -> str:
        return f"--- {self.what}: {self.log} (last {n} chars) ---\n{self.text()[-n:]}"

    def wait(self, timeout: float = TIMEOUT_S) -> int:
        """Exit code; a run still going `timeout` s after its start is stopped: AssertionError."""
        try:
            rc = self.proc.wait(timeout=max(1.0, timeout - (time.monotonic() - self.t0)))
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"{self.what}: still running after {timeout:.0f}s") from None
        self._reaper.join()
        print(f"{self.what}: rc={rc}, {self.wall:.1f}s")
        return rc

    def stop(self) -> None:
        """Interrupt it like Ctrl-C (Snakemake then scancels its own jobs) and reap it."""
        if self.running():
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self._fh.close()


def _submissions(log: str) -> list[tuple[str, Path]]:
    """(Slurm job id, its Slurm log file) for every job the plugin submitted, in order."""
    return [(jid, Path(path)) for jid, path in SUBMITTED.findall(log)]


def _job_stats(log: str) -> dict[str, int]:
    """The 'Job stats' table Snakemake prints before it starts: rule -> number of jobs."""
    block = log.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    rows = dict(re.findall(r"^(\w+)\s+(\d+)\s*$", block, flags=re.M))
    rows.pop("total", None)
    return {rule: int(n) for rule, n in rows.items()}


def _executed_in_slurm(submissions: list[tuple[str, Path]]) -> dict[str, int]:
    """rule -> number of jobs that executed inside these Slurm jobs. The innermost
    Snakemake (the `srun` step that runs the rule's script) logs `localrule <name>:` into
    the Slurm job's log, once per job it executes."""
    counts: dict[str, int] = {}
    for _, log in submissions:
        for rule in re.findall(r"^localrule (\w+):", log.read_text(errors="replace"), re.M):
            counts[rule] = counts.get(rule, 0) + 1
    return counts


def _read_table(path: Path) -> list[list[str]]:
    """A CSV as strings (exact: the float repr is compared), timing columns dropped."""
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        return rows
    keep = [i for i, name in enumerate(rows[0]) if name not in TIMING_COLUMNS]
    return [[r[i] for i in keep] for r in rows]


def _files(root: Path, pattern: str) -> set[str]:
    """Files under `root` matching `pattern`, relative, excluding the per-job logs."""
    return {
        str(p.relative_to(root))
        for p in root.rglob(pattern)
        if p.is_file() and p.relative_to(root).parts[0] != "logs"
    }


# --- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    require_slurm()
    t0 = time.monotonic()
    with local_slurm(
        tmp_path_factory.mktemp("slurm"), cpus=NODE_CPUS, min_job_age=MIN_JOB_AGE_S
    ) as c:
        print(f"\nlocal_slurm up in {time.monotonic() - t0:.1f}s: {c}")
        yield c
        t1 = time.monotonic()
    print(f"local_slurm stopped in {time.monotonic() - t1:.1f}s")


class Preemption:
    """The scancel scenario, run in a background thread (it mostly waits).

    Starts the Slurm run and, concurrently, the uninterrupted local reference; waits for
    the job to be RUNNING with a resume point written, scancels it, then waits for both
    runs. Everything that depends on timing (job states, which disappear from squeue
    after MinJobAge) is recorded as it happens; the test asserts on the record.
    """

    def __init__(self, cluster, root: Path):
        self.cluster = cluster
        # the live config: the run id must be the one the Snakemake runs train
        cfg = mbc.config.load(
            yaml.safe_load((REPO / "config.yaml").read_text()),
            {"preset": "smoke", **PREEMPT_OVERRIDES},
        )
        self.run_id = cfg.run_ids("E1")[0]
        self.ref_out, self.out = root / "local", root / "slurm"
        self.target = self.out / "runs" / self.run_id / "metrics.csv"
        self.state = self.out / "runs" / self.run_id / "state"
        self.ref_target = self.ref_out / "runs" / self.run_id / "metrics.csv"
        self.t0 = time.monotonic()
        self.local = Run(
            [
                "--cores",
                "1",
                str(self.ref_target),
                *_config_args(self.ref_out, **PREEMPT_OVERRIDES),
            ],
            root / "local.log",
            "preemption: uninterrupted local training",
        )
        self.slurm = Run(
            [
                "--profile",
                str(TEST_PROFILE),
                str(self.target),
                *_config_args(self.out, **PREEMPT_OVERRIDES),
            ],
            root / "slurm.log",
            "preemption: training through Slurm (scancel + retry)",
        )
        self.rec: dict = {}
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._scenario, daemon=True)
        self._thread.start()

    def _scenario(self) -> None:
        try:
            self._scancel_mid_run()
            self.rec["rc"] = self.slurm.wait()
            self.rec["t_done"] = time.monotonic()
            self.rec["states"] = {jid: s for jid, s, _ in self.cluster.squeue()}
            self.rec["rc_local"] = self.local.wait()
        except BaseException as exc:  # re-raised by join() in the test
            self.error = exc

    def _scancel_mid_run(self) -> None:
        deadline = self.t0 + TIMEOUT_S
        # Wait for a resume point with step > 0 (the log entry is written after
        # resume.pt, so a complete entry means a usable checkpoint).
        step = 0
        while step == 0:
            if not self.slurm.running():
                raise AssertionError("the Slurm run ended before any resume point")
            if time.monotonic() > deadline:
                raise AssertionError(f"no resume point after {TIMEOUT_S:.0f}s")
            time.sleep(0.2)
            step = last_resume_step(self.state / "log.jsonl")
        # The job writing it is the latest submission (a `run` group job, or a plain
        # train job with an ungrouped profile); it must be RUNNING.
        jobid, log = _submissions(self.slurm.text())[-1]
        state = self.cluster.wait_for_state(jobid, {"RUNNING"}, timeout=30)
        assert (self.state / "resume.pt").exists()
        self.cluster.run("scancel", jobid)
        t = time.monotonic()
        self.rec.update(jobid=jobid, jobid_log=log, state_before=state, resume_step=step)
        self.rec["finished_before_scancel"] = self.target.exists()
        self.rec["state_after"] = self.cluster.wait_for_state(jobid, {"CANCELLED"}, timeout=60)
        self.rec["t_cancel"] = t
        print(f"preemption: scancel job {jobid} at step >= {step} ({t - self.t0:.1f}s in)")

    def join(self) -> dict:
        self._thread.join(timeout=TIMEOUT_S + 120)
        if self.error is not None:
            raise AssertionError(
                f"preemption scenario failed: {self.error!r}\n{self.slurm.tail()}\n"
                f"{self.local.tail(3000)}\n{self.cluster.log_tail(10)}"
            ) from self.error
        return self.rec

    def stop(self) -> None:
        self.slurm.stop()
        self.local.stop()


@pytest.fixture(scope="module")
def preemption(cluster, tmp_path_factory):
    """Started as soon as the first test of the module asks for it (the smoke test does,
    so that the scenario's waiting overlaps the smoke runs)."""
    p = Preemption(cluster, tmp_path_factory.mktemp("preemption"))
    yield p
    p.stop()


# --- tests -------------------------------------------------------------------------------


def test_test_profile_dag_is_valid(tmp_path):
    """The job groups of profiles/slurm-test fit the workflow (a dry run; no Slurm)."""
    require_plugin()
    out = tmp_path / "dry"
    p = subprocess.run(
        [snakemake_exe(), "--profile", str(TEST_PROFILE), "-n", "all", *_config_args(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    assert "Group job run" in p.stdout, p.stdout[-4000:]
    assert not out.exists()


@pytest.mark.slow  # about 10 minutes on 2 cores: `pytest -m slow`
def test_smoke_through_slurm_equals_local(cluster, preemption, smoke, tmp_path):
    # `smoke` (conftest) is the local reference, shared with test_workflow: it runs while
    # the preemption scenario waits, then the same preset goes through Slurm.
    local_out, slurm_out = smoke, tmp_path / "slurm"
    t0 = time.monotonic()
    slurm = Run(
        ["--profile", str(TEST_PROFILE), "all", *_config_args(slurm_out)],
        tmp_path / "slurm.log",
        "smoke: run through Slurm",
    )
    try:
        rc_slurm = slurm.wait()
    finally:
        slurm.stop()
    print(f"smoke: the run through Slurm: {time.monotonic() - t0:.1f}s")
    assert rc_slurm == 0, slurm.tail() + "\n" + cluster.log_tail()

    # Every job of the DAG (all but the target rule `all`) executed inside a Slurm job,
    # and every Slurm job completed (no retries were needed).
    log = slurm.text()
    expected = {rule: n for rule, n in _job_stats(log).items() if rule != "all"}
    submitted = _submissions(log)
    executed = _executed_in_slurm(submitted)
    assert executed == expected, f"executed in Slurm {executed}, DAG {expected}"
    assert {"dataset", "train", "summarize_run", "fits", "tex"} <= set(executed), executed
    states = {jid: state for jid, state, _ in cluster.squeue()}
    ids = [jid for jid, _ in submitted]
    assert all(states.get(j) == "COMPLETED" for j in ids), {j: states.get(j) for j in ids}
    print(f"smoke: {sum(expected.values())} jobs of {len(expected)} rules in {len(ids)} Slurm jobs")

    # Identical outputs.
    tables = _files(local_out, "*.csv")
    assert tables == _files(slurm_out, "*.csv")
    for name in ("tau.csv", "fits.csv", "statistics.csv", "hypotheses.csv", "scorecard.csv"):
        assert name in tables, sorted(tables)
    assert any(t.startswith("diagnostics/") for t in tables), sorted(tables)
    assert any(t.endswith("/checkpoints.csv") for t in tables), sorted(tables)
    differ = [t for t in sorted(tables) if _read_table(local_out / t) != _read_table(slurm_out / t)]
    assert not differ, f"tables differ (local vs Slurm): {differ}"

    summaries = _files(local_out, "summary.json")
    assert summaries and summaries == _files(slurm_out, "summary.json")
    for name in summaries:
        a, b = (json.loads((root / name).read_text()) for root in (local_out, slurm_out))
        assert a == b, name

    tex = _files(local_out, "*.tex")
    assert {"tex/numbers.tex", "tex/tables/fits.tex"} <= tex, sorted(tex)
    assert tex == _files(slurm_out, "*.tex")
    for name in sorted(tex):
        assert (local_out / name).read_text() == (slurm_out / name).read_text(), name

    figures = _files(local_out / "figures", "*")
    assert figures and figures == _files(slurm_out / "figures", "*")
    for name in figures:
        assert (slurm_out / "figures" / name).stat().st_size > 1000, name
    pdf = Path("paper") / "main.pdf"
    assert (local_out / pdf).exists() == (slurm_out / pdf).exists()
    if (local_out / pdf).exists():
        assert (slurm_out / pdf).read_bytes()[:4] == b"%PDF"


@pytest.mark.slow
def test_scancelled_training_resumes_from_checkpoint(cluster, preemption):
    p = preemption
    rec = p.join()
    print(
        f"preemption: scancel -> retried job done {rec['t_done'] - rec['t_cancel']:.1f}s, "
        f"total {rec['t_done'] - p.t0:.1f}s"
    )
    assert not rec["finished_before_scancel"], "training ended before scancel: raise PREEMPT_STEPS"
    assert rec["state_before"] == "RUNNING" and rec["state_after"] == "CANCELLED", rec
    assert rec["rc"] == 0, p.slurm.tail() + "\n" + p.cluster.log_tail()
    assert rec["rc_local"] == 0, p.local.tail()

    # The profile's retries submitted a new Slurm job, and it completed.
    jobs = [jid for jid, _ in _submissions(p.slurm.text())]
    retried = jobs[jobs.index(rec["jobid"]) + 1 :]
    assert retried, jobs
    assert rec["states"].get(retried[-1]) == "COMPLETED", (jobs, rec["states"])
    assert "Trying to restart job" in p.slurm.text()

    train_log = (p.out / "logs" / "train" / f"{p.run_id}.log").read_text()
    pattern = rf"resuming {re.escape(p.run_id)} from step (\d+)"
    resumed = [int(n) for n in re.findall(pattern, train_log)]
    assert resumed, train_log
    assert rec["resume_step"] <= resumed[0] < PREEMPT_STEPS, (rec, train_log)
    print(f"preemption: resumed from step {resumed[0]} of {PREEMPT_STEPS}")

    for name in ("metrics.csv", "checkpoints.csv"):
        a = _read_table(p.ref_out / "runs" / p.run_id / name)
        b = _read_table(p.out / "runs" / p.run_id / name)
        assert len(a) > 1 and a == b, f"{name}: the resumed run differs from the uninterrupted one"
    metrics = _read_table(p.target)
    assert int(metrics[-1][metrics[0].index("step")]) == PREEMPT_STEPS, metrics[-1]
