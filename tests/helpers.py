"""Shared test helpers (tiny configs)."""

from mbc.spec import EvalSpec, ModelSpec, RunSpec, TaskSpec, TrainSpec


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
        ),
    )
