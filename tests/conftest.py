import pytest
import torch
from helpers import smoke_args, snakemake


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def smoke(tmp_path_factory):
    """The smoke preset run once, locally (--cores 2), for every test that reads its outputs:
    test_workflow's checks and the Slurm end-to-end test's local reference."""
    out = tmp_path_factory.mktemp("smoke") / "results"
    snakemake("all", *smoke_args(out))
    return out
