import pytest
import torch
from helpers import smoke_args, snakemake


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _machine_caches(tmp_path_factory, monkeypatch):
    """The machine caches (rates, calibrations, the arithmetic probe) live under the test
    session's own directory, not the user's ~/.cache: no test reads what an earlier run on
    this machine left there, and none writes into it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))


@pytest.fixture(scope="session")
def smoke(tmp_path_factory):
    """The smoke preset run once, locally (--cores 2), for every test that reads its outputs:
    test_workflow's checks and the Slurm end-to-end test's local reference."""
    out = tmp_path_factory.mktemp("smoke") / "results"
    res = snakemake("all", *smoke_args(out))
    # what a user's terminal showed (test_workflow reads it); beside the outdir, not in it
    (out.parent / "console.txt").write_text(res.stdout + res.stderr)
    (out.parent / "console_stderr.txt").write_text(res.stderr)
    return out
