"""What a run starts from (docs/method.md#initialisation): the device, its initial weights,
its optimiser and its fixed evaluation batch. The one trainer (`mbc.training.train`) and
the tools that time or calibrate its step (`mbc.planning.timing`, `mbc.estimate`) build
runs from these alone, so every run starts the same way wherever it trains.
"""

from __future__ import annotations

import numpy as np
import torch

from mbc.core.spec import B_LEN, RunSpec, TrainSpec
from mbc.training.data import STREAM_EVAL, STREAM_INIT, Dataset, base_strings, stream_seed
from mbc.training.metrics import ENGINES, EvalBatch, fixed_contexts, make_eval_batch
from mbc.training.model import build_model

PRECISIONS = ("fp32", "bf16")


def check_train(train: TrainSpec) -> None:
    """The arithmetic and the evaluation engine as the trainer knows them (`auto` resolved
    before): a ValueError naming the key otherwise."""
    if train.precision not in PRECISIONS:
        raise ValueError(f"train.precision = {train.precision!r}: expected one of {PRECISIONS}")
    if train.engine not in ENGINES:
        raise ValueError(f"train.engine = {train.engine!r}: expected one of {sorted(ENGINES)}")


def pick_device(requested: str | torch.device = "auto") -> torch.device:
    """Chosen once at the entry point: CUDA when present (or asked for), else CPU."""
    requested = str(requested)
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device={requested!r} requested but CUDA is not available")
    return torch.device(requested)


def initial_model(spec: RunSpec) -> torch.nn.Module:
    """The run's model at its initial weights, drawn from its own STREAM_INIT (on the CPU:
    the same draw on every device); the identity linear baseline's e_B vocabulary is its
    dataset's base strings."""
    gen = torch.Generator().manual_seed(stream_seed(spec.seed, STREAM_INIT))
    model = build_model(spec.model, spec.task, gen)
    if hasattr(model, "bases"):
        model.bases.copy_(base_strings(spec.task, spec.seed))
    return model


def check_bases(model: torch.nn.Module, dataset: Dataset, run_id: str) -> None:
    """The identity linear baseline's B strings are its dataset's, group by group: a
    dataset file from another generator under the same id would otherwise give every
    unknown B a zero e_B, silently. A ValueError naming the run otherwise."""
    if not hasattr(model, "bases"):
        return
    own = torch.zeros_like(model.bases)
    own[dataset.group] = dataset.clean_tokens[:, 1 : 1 + B_LEN].to(own.device)
    if not torch.equal(own, model.bases):
        raise ValueError(f"run {run_id}: its dataset's B strings are not its model's (e_B)")


def make_optimizer(model: torch.nn.Module, spec: RunSpec) -> torch.optim.AdamW:
    """torch's AdamW with the run's hyperparameters, over the parameters of `model`."""
    t = spec.train
    return torch.optim.AdamW(
        model.parameters(),
        lr=t.lr,
        betas=(t.beta1, t.beta2),
        eps=t.eps,
        weight_decay=t.weight_decay,
        # fused kernels exist on CPU and CUDA and are numerically the same algorithm
        fused=True,
    )


def eval_batch(spec: RunSpec, dataset: Dataset, device: torch.device) -> EvalBatch:
    """The run's fixed evaluation batch (its own seed's contexts and z-shuffles)."""
    rng = np.random.default_rng(stream_seed(spec.seed, STREAM_EVAL))
    contexts = fixed_contexts(dataset, spec.eval.n_contexts, rng)
    return make_eval_batch(dataset, contexts, rng).to(device)
