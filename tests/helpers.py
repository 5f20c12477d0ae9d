"""Shared test helpers: a tiny run, the fixture config; the Slurm tests' "required in CI" checks."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from slurm_cluster import INSTALL_HINT, missing_binaries

from mbc.core.artifacts import built_from, write_csv_atomic, write_json_atomic
from mbc.core.journal import read_journal
from mbc.core.spec import EvalSpec, ModelSpec, RunSpec, TaskSpec, TrainSpec
from mbc.workflow.integrity import RunFiles

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def fixture_config() -> dict:
    """tests/fixtures/analysis.yaml (diagnostics, statistics, a scorecard row), a fresh copy:
    what the analysis tests pin, so an edit of the live config.yaml never changes them."""
    return yaml.safe_load((FIXTURES / "analysis.yaml").read_text())


def tiny_spec(**task) -> RunSpec:
    """A run that trains in about a second on one CPU core."""
    return RunSpec(
        task=TaskSpec(**{"k": 3, "n_groups": 12, **task}),
        model=ModelSpec(n_layers=2, n_heads=2, d_model=32, d_mlp=64),
        train=TrainSpec(lr=3e-3, batch_size=16, max_steps=120, early_stop_tau_factor=0),
        eval=EvalSpec(
            every=20,
            n_log=5,
            n_contexts=36,
            checkpoint_every=40,
            checkpoint_n_log=2,
            resume_every=20,
            dense_every=10,
        ),
    )


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(reason: str) -> None:
    """Skip locally; fail in CI, which is expected to install what the test needs."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set, so this is an error, not a skip)")
    pytest.skip(reason)


def require_slurm() -> None:
    """Slurm + munge binaries, root (local_slurm writes /etc/slurm) and the plugin."""
    missing = missing_binaries()
    if missing:
        unavailable(f"Slurm/munge not installed (missing {', '.join(missing)}); {INSTALL_HINT}")
    if os.geteuid() != 0:
        unavailable("local_slurm needs root")
    require_plugin()


def require_plugin() -> None:
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:
        unavailable('snakemake-executor-plugin-slurm not installed (pip install ".[slurm]")')


def snakemake_exe() -> str:
    """The snakemake next to this interpreter (the venv's), else the one on PATH."""
    exe = Path(sys.executable).with_name("snakemake")
    return str(exe) if exe.exists() else (shutil.which("snakemake") or "snakemake")


def last_resume_step(log_jsonl: Path) -> int:
    """Step of the last complete `resume` entry in a run's state/log.jsonl (0: none yet).
    The entry is written after resume.pt, so a complete one means a usable checkpoint."""
    marks = [r["step"] for r in read_journal(log_jsonl) if r.get("event") == "resume"]
    return marks[-1] if marks else 0


REPO = Path(__file__).resolve().parents[1]


def smoke_args(out: Path) -> list[str]:
    """--config for the smoke preset with every output (the PDF included) under `out`."""
    return ["--config", "preset=smoke", f"outdir={out}", f"paper_pdf={out}/paper/main.pdf"]


def snakemake(*args, check=True, full_console=False) -> subprocess.CompletedProcess:
    """`snakemake --cores 2 ARGS` in the repository; a failure raises with the output's tail.
    full_console: Snakemake's per-job lines on the console too (MBC_CONSOLE=full), for a
    test that reads which rules ran."""
    cmd = [snakemake_exe(), "--cores", "2", *args]
    env = {k: v for k, v in os.environ.items() if k != "MBC_CONSOLE"}  # the user's own
    env |= {"MBC_CONSOLE": "full"} if full_console else {}
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    if check and res.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-6000:]}")
    return res


def planted_run(root: Path, tau: int = 30) -> RunFiles:
    """A finished run `r` under `root` as the workflow leaves it: its dataset, train tables,
    log, summary (tau `tau`) and one Hessian diagnostic (lam = `tau`), each table with its
    sidecar naming its inputs."""
    run = root / "runs" / "r"
    files = RunFiles(
        "r",
        root / "datasets" / "d.pt",
        [run / "metrics.csv", run / "checkpoints.csv"],
        run / "summary.json",
        [root / "diagnostics" / "hessian" / "r.csv"],
    )
    files.dataset.parent.mkdir(parents=True)
    files.dataset.write_bytes(b"a dataset")
    write_csv_atomic(files.train[0], pd.DataFrame({"step": [0, 10]}))
    write_csv_atomic(files.train[1], pd.DataFrame({"step": [], "path": [], "sha256": []}))
    log = run / "state" / "log.jsonl"  # the log its tables were written from
    log.parent.mkdir(parents=True)
    log.write_text('{"event": "start", "step": 0}\n{"event": "done", "step": 10}\n')
    with built_from(files.train):
        write_json_atomic(files.summary, {"run_id": "r", "tau": tau})
    with built_from([files.dataset, files.train[1], files.summary]):
        write_csv_atomic(files.diagnostics[0], pd.DataFrame({"step": [10], "lam": [tau]}))
    return files
