import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)
