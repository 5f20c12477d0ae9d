"""Slurm infrastructure tests against a real single-node Slurm started by the test.

(a) test_tiny_workflow_through_slurm_test_profile: a 3-rule workflow written into tmp_path
    runs to completion through profiles/slurm-test on the local cluster.
(b) test_real_profile_gpu_request_reaches_sbatch: the GPU request of the *real* profile
    (profiles/slurm, `set-resources: train/train_pack: gpu: 1, cpus_per_gpu: ...`) arrives on the
    sbatch command line. How: the plugin logs every submission at debug level as
    `sbatch call: sbatch ... --gpus=1` (shown with `--verbose`). The test node has no
    GPU, so the real sbatch rejects the `train` job ("Invalid generic resource (gres)
    specification") -- proof that sbatch itself received the GPU request -- and the plugin
    repeats the full call in its "SLURM sbatch failed" error. A CPU rule submitted in the
    same run must succeed and carry --cpus-per-task but no GPU flag. The profile used is
    profiles/slurm/config.yaml with only the user-edited lines removed (slurm_account,
    slurm_partition: placeholders there) and the test cluster's status-check settings
    (no accounting) added.

Skipped when the Slurm/munge binaries (or root, or the plugin) are missing, unless CI is
set: then the test fails, because CI is expected to install them
(`apt-get install -y slurm-wlm munge`).
"""

from __future__ import annotations

import re
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from helpers import require_slurm, snakemake_exe
from slurm_cluster import local_slurm

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[1]
REAL_PROFILE = REPO / "profiles" / "slurm" / "config.yaml"
TEST_PROFILE = REPO / "profiles" / "slurm-test" / "config.yaml"
# The lines of the real profile that a user edits for their cluster.
USER_SETTINGS = ("slurm_account", "slurm_partition")
# Settings the local cluster needs (no accounting), taken from the test profile.
STATUS_SETTINGS = ("slurm-status-command", "slurm-init-seconds-before-status-checks")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    require_slurm()
    t0 = time.monotonic()
    with local_slurm(tmp_path_factory.mktemp("slurm")) as c:
        print(f"local_slurm up in {time.monotonic() - t0:.1f}s: {c}")
        yield c
        print(c.log_tail(5))


def _run_snakemake(args: list[str], cwd: Path, timeout: float) -> tuple[int, str, float]:
    t0 = time.monotonic()
    p = subprocess.run(
        [snakemake_exe(), *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    wall = time.monotonic() - t0
    (cwd / "snakemake.out").write_text(p.stdout)
    return p.returncode, p.stdout, wall


def _sbatch_calls(log: str) -> dict[str, str]:
    """rule name -> the sbatch command line the plugin logged for it (last one wins)."""
    calls = {}
    for line in log.splitlines():
        m = re.search(r"sbatch call: (sbatch .*)$", line)
        if m:
            rule = re.search(r"--comment '?rule_([A-Za-z0-9_]+?)(?:_wildcards_\S*?)?'?\s", m[1])
            calls[rule[1] if rule else "?"] = m[1]
    return calls


def test_tiny_workflow_through_slurm_test_profile(cluster, tmp_path):
    threads_b = min(2, cluster.cpus)
    (tmp_path / "Snakefile").write_text(
        textwrap.dedent(
            f"""
            rule all:
                input: "c.txt"

            rule a:
                output: "a.txt"
                shell: "echo a $SLURM_JOB_ID > {{output}}"

            rule b:
                input: "a.txt"
                output: "b.txt"
                threads: {threads_b}
                shell:
                    "cat {{input}} > {{output}};"
                    " echo b $SLURM_JOB_ID $SLURM_CPUS_PER_TASK >> {{output}}"

            rule c:
                input: "b.txt"
                output: "c.txt"
                shell: "cat {{input}} > {{output}}; echo c $SLURM_JOB_ID >> {{output}}"
            """
        )
    )
    rc, log, wall = _run_snakemake(
        ["--profile", str(TEST_PROFILE.parent), "--verbose", "all"], tmp_path, timeout=600
    )
    print(f"3-rule workflow through Slurm: rc={rc}, {wall:.1f}s")
    assert rc == 0, log[-6000:] + "\n" + cluster.log_tail()

    lines = (tmp_path / "c.txt").read_text().split()
    # every rule ran inside a Slurm job (SLURM_JOB_ID set, distinct per rule)
    ids = [lines[1], lines[3], lines[6]]
    assert [lines[0], lines[2], lines[5]] == ["a", "b", "c"], lines
    assert all(i.isdigit() for i in ids) and len(set(ids)) == 3, lines
    assert lines[4] == str(threads_b), f"SLURM_CPUS_PER_TASK for rule b: {lines}"
    assert len(re.findall(r"has been submitted with SLURM jobid", log)) == 3

    calls = _sbatch_calls(log)
    assert set(calls) == {"a", "b", "c"}, calls
    assert f"--cpus-per-task={threads_b}" in calls["b"]  # cpus_per_task: threads
    assert "--cpus-per-task=1" in calls["a"]
    assert all(" -A " not in c and "--gpus" not in c for c in calls.values()), calls

    states = {jid: state for jid, state, _ in cluster.squeue()}
    assert all(states.get(i) == "COMPLETED" for i in ids), states


def test_real_profile_gpu_request_reaches_sbatch(cluster, tmp_path):
    real = yaml.safe_load(REAL_PROFILE.read_text())
    test = yaml.safe_load(TEST_PROFILE.read_text())
    train = real["set-resources"]["train"]
    assert train.get("gpu") or "gpu" in str(train.get("gres", "")), train
    assert train.get("cpus_per_gpu"), train

    derived = dict(real)
    derived["default-resources"] = {
        k: v for k, v in real["default-resources"].items() if k not in USER_SETTINGS
    }
    derived["set-resources"] = {
        rule: {k: v for k, v in res.items() if k not in USER_SETTINGS}
        for rule, res in real["set-resources"].items()
    }
    derived.update({k: test[k] for k in STATUS_SETTINGS})
    prof = tmp_path / "profile"
    prof.mkdir()
    (prof / "config.yaml").write_text(yaml.safe_dump(derived, sort_keys=False))

    # `dataset` (CPU) and `train` (GPU) are both ready at once, so both get submitted.
    (tmp_path / "Snakefile").write_text(
        textwrap.dedent(
            """
            rule all:
                input: "data/d.txt", "runs/r1/metrics.csv", "packs/p1.json"

            rule dataset:
                output: "data/d.txt"
                shell: "echo $SLURM_JOB_ID > {output}"

            rule train:
                output: "runs/{run_id}/metrics.csv"
                shell: "touch {output}"

            rule train_pack:
                output: "packs/{pack_id}.json"
                shell: "touch {output}"
            """
        )
    )
    rc, log, wall = _run_snakemake(
        ["--profile", str(prof), "--verbose", "--retries", "0", "all"], tmp_path, timeout=600
    )
    print(f"real-profile GPU submission: rc={rc}, {wall:.1f}s")

    calls = _sbatch_calls(log)
    # both GPU rules: one run per job (train) and a pack of runs per job (train_pack)
    assert {"dataset", "train", "train_pack"} <= set(calls), log[-6000:]
    cpu_call = calls["dataset"]
    for rule in ("train", "train_pack"):
        res, gpu_call = real["set-resources"][rule], calls[rule]
        print(f"{rule} sbatch call:", gpu_call)
        expected_gpu = (
            f"--gpus={res['gpu_model']}:{res['gpu']}"
            if res.get("gpu_model")
            else f"--gpus={res['gpu']}"
            if res.get("gpu")
            else f"--gres={res['gres']}"
        )
        assert expected_gpu in gpu_call.split(), gpu_call
        assert f"--cpus-per-gpu={res['cpus_per_gpu']}" in gpu_call.split(), gpu_call
        assert "--cpus-per-task" not in gpu_call, gpu_call  # the default must not win
        assert f"--mem {res['mem_mb']}" in gpu_call, gpu_call
        assert f"-t {res['runtime']}" in gpu_call, gpu_call
        if real.get("slurm-requeue"):
            assert "--requeue" in gpu_call.split(), gpu_call

    assert "--gpus" not in cpu_call and "--gres" not in cpu_call, cpu_call
    assert "--cpus-per-task=1" in cpu_call.split(), cpu_call
    assert f"--mem {real['default-resources']['mem_mb']}" in cpu_call, cpu_call

    # sbatch itself saw the GPU request and refused it (this node has no GPU) ...
    assert rc != 0
    assert "SLURM sbatch failed" in log, log[-6000:]
    refusal = re.search(r"SLURM sbatch failed\. The error message was '([^']*)'", log)
    print("sbatch refusal:", refusal[1] if refusal else None)
    if cluster.real_memory_mb >= int(train["mem_mb"]):  # else memory may be refused first
        assert refusal and "gres" in refusal[1].lower(), log[-6000:]
    assert not (tmp_path / "runs" / "r1" / "metrics.csv").exists()
    # ... while the CPU job of the same run went through Slurm normally.
    assert (tmp_path / "data" / "d.txt").read_text().strip().isdigit(), log[-6000:]
