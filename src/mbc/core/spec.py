"""Frozen run specifications: the typed boundary between config.yaml and the package.

A `RunSpec` fully determines one training run (task, model, optimiser, evaluation,
seed); its `run_id` is derived from its content, never from a timestamp, so the same
spec always maps to the same directory and identical specs in two experiments train once.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
PAD, BOS, EOS, SEP = 0, 1, 2, 3
CHAR0 = 4  # characters take ids 4..39
VOCAB = CHAR0 + len(ALPHABET)
B_LEN = 6  # base string length
A_LEN = 4  # target string length
REVERSE_DIRECTIONS = ("az_to_b", "a_to_b")  # B out; az_to_b is the author's reverse task

# A run field is declared once, here: its name, type and default, and the JSON-schema
# constraints config.yaml's values must meet (`run_field`); `section_schema` turns a
# section into the config schema's definition of it (`mbc.core.config_loader.schema`), and
# config.yaml's `defaults` equal these defaults (tests/test_config.py).
_JSON_TYPES = {
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "str": "string",
    "float | None": ["number", "null"],
}


def run_field(default: Any, **constraints: Any) -> Any:
    """A run field's default and its JSON-schema constraints (`minimum`, `enum`, ...)."""
    return field(default=default, metadata={"schema": constraints})


def section_schema(cls: type) -> dict:
    """The JSON schema of one run section (`TaskSpec`, ...): every field, its JSON type
    from its annotation (an `enum` stands instead of a type), its constraints, no others."""
    props = {}
    for f in dataclasses.fields(cls):
        constraints = dict(f.metadata.get("schema", {}))
        props[f.name] = (
            constraints
            if "enum" in constraints
            else {"type": _JSON_TYPES[str(f.type)], **constraints}
        )
    return {"type": "object", "additionalProperties": False, "properties": props}


@dataclass(frozen=True)
class TaskSpec:
    """The task (docs/method.md#task-variants). `direction`: bz_to_a (the main task, B and z
    in, A out) or a reverse task, B out: az_to_b (A and z in, the author's reverse task; z is redundant since every
    A is unique) or a_to_b (A alone in)."""

    k: int = 10
    n_groups: int = run_field(1000, minimum=1)
    z_length: int = run_field(2, minimum=1, maximum=4)
    sharing: str = run_field("shared", enum=["shared", "supergroup", "private"])
    n_supergroups: int = run_field(1, minimum=1)  # used when sharing == "supergroup"
    label_noise: float = 0.0
    direction: str = run_field("bz_to_a", enum=["bz_to_a", "az_to_b", "a_to_b"])
    unique_first_chars: bool = True

    @property
    def d(self) -> int:
        """Dataset size D = n_groups * K (every example is trained on)."""
        return self.n_groups * self.k

    @property
    def n_selector_sets(self) -> int:
        """G: how many independent selector lists exist."""
        return {"shared": 1, "supergroup": self.n_supergroups, "private": self.n_groups}[
            self.sharing
        ]

    @property
    def sharing_factor(self) -> float:
        """Groups per selector list, n_groups / G (docs/method.md#e11)."""
        return self.n_groups / self.n_selector_sets

    @property
    def reverse(self) -> bool:
        """B is the answer (a_to_b, az_to_b)."""
        return self.direction in REVERSE_DIRECTIONS

    @property
    def seq_len(self) -> int:
        if self.direction == "a_to_b":
            return 1 + A_LEN + 1 + B_LEN + 1
        if self.direction == "az_to_b":
            return 1 + A_LEN + 1 + self.z_length + 1 + B_LEN + 1
        return 1 + B_LEN + 1 + self.z_length + 1 + A_LEN + 1

    @property
    def n_targets(self) -> int:
        """Target tokens scored by the loss: the answer's characters plus EOS."""
        return (B_LEN if self.reverse else A_LEN) + 1

    @property
    def first_pred_pos(self) -> int:
        """Input position whose output predicts the first target token."""
        return self.seq_len - self.n_targets - 1

    @property
    def z_positions(self) -> tuple[int, ...]:
        if self.direction == "a_to_b":
            return ()
        start = 1 + (A_LEN if self.direction == "az_to_b" else B_LEN) + 1
        return tuple(range(start, start + self.z_length))

    @property
    def log_k(self) -> float:
        return math.log(self.k)


@dataclass(frozen=True)
class ModelSpec:
    """The model (docs/method.md#model). kind: transformer (pre-LN decoder) or linear (E13
    baseline)."""

    kind: str = run_field("transformer", enum=["transformer", "linear"])
    n_layers: int = run_field(4, minimum=1)
    n_heads: int = run_field(4, minimum=1)
    d_model: int = run_field(128, minimum=1)
    d_mlp: int = run_field(512, minimum=1)
    n_positions: int = run_field(32, minimum=1)
    linear_hidden: int = run_field(512, minimum=1)
    # The linear baseline's e_B (the paper's W2 W1 [e_B; e_z] does not say which):
    # `characters`, one one-hot per character of B (a sum of one term per position, which
    # cannot store a group's own K first characters); `identity`, one one-hot over the
    # dataset's B strings (which can). e_z is per character either way. In the run id only
    # when not `characters` (NEW_FIELDS).
    linear_input: str = run_field("characters", enum=["characters", "identity"])
    # Every weight matrix (embeddings and unembedding included) ~ N(0, std), biases 0,
    # LayerNorm 1/0. `transformer_lens`: the author's model (HookedTransformer,
    # init_mode="gpt2", default initializer_range), std = 0.8 / sqrt(width); `normal`:
    # std = 0.02 (Hugging Face GPT-2's constant, without its residual rescaling).
    # `init_std` overrides the scheme's std.
    init: str = run_field("transformer_lens", enum=["transformer_lens", "normal"])
    init_std: float | None = run_field(None, exclusiveMinimum=0)

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def width(self) -> int:
        """The residual width the init rule scales with: d_model, or the linear baseline's
        hidden width (its analogue of the residual stream)."""
        return self.linear_hidden if self.kind == "linear" else self.d_model

    @property
    def label(self) -> str:
        """The kind as run ids name it: `linear_identity` for the baseline on B's identity."""
        return (
            "linear_identity"
            if self.kind == "linear" and self.linear_input == "identity"
            else self.kind
        )

    def linear_n_in(self, task: TaskSpec) -> int:
        """Width of the linear baseline's one-hot input [e_B; e_z] (`linear_input`)."""
        n_b = task.n_groups if self.linear_input == "identity" else B_LEN * VOCAB
        return n_b + task.z_length * VOCAB

    @property
    def weight_std(self) -> float:
        """Standard deviation of every weight matrix at initialisation."""
        if self.init_std is not None:
            return float(self.init_std)
        if self.init == "transformer_lens":
            return 0.8 / math.sqrt(self.width)
        if self.init == "normal":
            return 0.02
        raise ValueError(f"model.init = {self.init!r}: expected transformer_lens or normal")

    @property
    def init_scale(self) -> float:
        """weight_std in units of the author's std at this width, 0.8 / sqrt(width) (E15)."""
        return self.weight_std / (0.8 / math.sqrt(self.width))


@dataclass(frozen=True)
class TrainSpec:
    lr: float = 1e-3
    batch_size: int = run_field(128, minimum=1)
    weight_decay: float = run_field(0.01, minimum=0)
    beta1: float = run_field(0.9, minimum=0, exclusiveMaximum=1)
    beta2: float = run_field(0.999, minimum=0, exclusiveMaximum=1)
    eps: float = run_field(1e-8, exclusiveMinimum=0)
    max_steps: int = run_field(50_000, minimum=1)
    # Learning-rate schedule (`mbc.training.schedule.learning_rate`): `constant` (the paper's main runs)
    # or `warmup_cosine` (the author's base regime, used for his batch-size and z-sharing
    # runs: linear warmup over warmup_steps, then cosine decay to 0 at max_steps).
    schedule: str = run_field("constant", enum=["constant", "warmup_cosine"])
    warmup_steps: int = run_field(0, minimum=0)
    clip_norm: float = run_field(0.0, minimum=0)  # clip the gradient's global L2 norm; 0: off
    # Stop once converged and at least `early_stop_tau_factor` * tau steps have run
    # (diagnostics need checkpoints up to ~2 tau). 0 disables early stopping.
    early_stop_tau_factor: float = run_field(3.0, minimum=0)
    # "converged": L_cand < this * log K
    early_stop_loss_fraction: float = run_field(0.02, exclusiveMinimum=0, exclusiveMaximum=1)
    # Also wait for the first-target crossing (L1 < eval.threshold log K on the same
    # evaluation grid): the factor then counts from the later of tau and that step. For
    # runs whose statistic is the first-target tau (E7), which can come several tau after
    # tau. A run that never crosses it runs its budget. In the run id only when set
    # (NEW_FIELDS).
    early_stop_first_target: bool = False
    # Also wait for the author's logged first-target crossing (the first training-log window
    # whose running-mean L1 on the training labels is below eval.threshold log K, which
    # `first_target_tau_log` reads): the factor then counts from the latest crossing it waits
    # for. For E7, whose author's tau reads that series (his analyze_batch_size_sensitivity.py
    # on training_history.json's first_target_loss); it lags the evaluated L1 by up to a
    # few windows. In the run id only when set (NEW_FIELDS).
    early_stop_first_target_log: bool = False
    # Which series the early stop reads: `candidate` (tau, then L_cand below the loss
    # fraction) or `train_log`: the author's logged first-target series (the running mean
    # of L1 on the training labels over each eval.dense_every window, mbc.training.author_log):
    # the factor counts from its first window below eval.threshold log K, and "converged" is
    # a window below early_stop_loss_fraction log K. For label noise (E12), whose clean-label
    # L_cand never converges while the corrupted training labels are memorised. In the run
    # id only when not `candidate` (NEW_FIELDS).
    early_stop_series: str = run_field("candidate", enum=["candidate", "train_log"])
    # How the in-loop evaluation is computed, not what: `fast` runs each context's shared
    # prefix once for its K candidates, `plain` every candidate sequence in full; equal to
    # float32 rounding (tests/test_train.py). Training has one forward either way.
    # `compile`: torch.compile the training loss (a cold compile costs about a minute).
    # Both are IMPLEMENTATION_FIELDS: outside the run id (see RunSpec.content_hash).
    # `auto` (compile, precision): chosen by the hardware (mbc.core.arithmetic) before any
    # run id exists.
    engine: str = run_field("fast", enum=["fast", "plain"])
    compile: bool = run_field(False, enum=[True, False, "auto"])
    # Arithmetic of the training forward and backward: fp32, or bf16 matmuls (one bf16 copy
    # of the linear layers a step, `mbc.training.packed`; weights, gradients, AdamW state and
    # every evaluation metric stay fp32/fp64). It changes the
    # numbers, so it is part of the run id, but only when not fp32 (NEW_FIELDS).
    precision: str = run_field("fp32", enum=["fp32", "bf16", "auto"])
    # A run stops as diverged at the first check (every eval.dense_every steps and at every
    # evaluation) where a loss is non-finite or above divergence_factor x log(vocabulary)
    # (mbc.core.divergence). It changes the outputs of a run that diverges only: in the
    # run id only when not at its default (NEW_FIELDS).
    divergence_factor: float = run_field(100.0, exclusiveMinimum=1)


# Fields that choose an implementation, not the computation: a numerically equivalent
# engine must not move a run to a new directory (nor retrain every existing run), so they
# are left out of the content hash, and out of `to_dict` at their defaults (Snakemake
# params, whose change would otherwise trigger reruns, stay exactly what they were).
IMPLEMENTATION_FIELDS = {"train": {"engine": "fast", "compile": False}}
# Fields added after runs existed that do change the computation: part of the content hash
# when set to anything but their default, left out at it, so every earlier run id stays.
NEW_FIELDS = {
    "train": {
        "precision": "fp32",
        "divergence_factor": 100.0,
        "early_stop_first_target": False,
        "early_stop_first_target_log": False,
        "early_stop_series": "candidate",
    },
    "eval": {"sampled_groups": 0},
    "model": {"linear_input": "characters"},
}


@dataclass(frozen=True)
class EvalSpec:
    """In-loop evaluation on fixed contexts: log-spaced early, every `every` steps, and
    every `dense_every` steps wherever the run crosses a transition mark (mbc.training.record)."""

    every: int = run_field(500, minimum=0)
    n_log: int = run_field(40, minimum=0)
    n_contexts: int = run_field(256, minimum=1)  # fixed (B_g, z_j) contexts x K candidates
    threshold: float = 0.5  # tau: first step with L_cand < threshold * log K
    # The author evaluated every 50 steps. Between two evaluations whose metrics lie on
    # different sides of a transition mark (`mbc.training.schedule.TRANSITION_MARKS`), the weights
    # kept every `dense_every` steps are evaluated too: each crossing is then located to
    # dense_every steps, at the cost of evaluating densely only around the transition.
    # 0: off. Must divide `every`.
    dense_every: int = run_field(50, minimum=0)
    # The author's grid: every evaluation from dense_every on falls on a multiple of it (the
    # log-spaced ones rounded up), and every statistic reads those rows only, so tau, the
    # onsets and the transition window are first crossings on his 50-step grid. The rows
    # before dense_every draw the curves' start only. False: the schedule as it was before.
    on_grid: bool = True
    # The author's evaluation (spec: his E6 window): every dense_every steps, L_cand of
    # this many groups drawn afresh by the step's own seed (random.Random(step)), one random
    # z each, logged beside the fixed evaluation in train_log.csv (`candidate_loss_sampled`);
    # 0: off. In the run id only when on (NEW_FIELDS).
    sampled_groups: int = run_field(0, minimum=0)
    checkpoint_every: int = run_field(500, minimum=0)  # model snapshots for the diagnostics
    checkpoint_n_log: int = run_field(24, minimum=0)
    resume_every: int = run_field(2500, minimum=1)  # full optimiser state, to resume a run


def grid_every(spec: EvalSpec) -> int:
    """The step multiple every statistic reads (EvalSpec.on_grid): dense_every, or 0 (every
    evaluated step) without the grid."""
    return spec.dense_every if spec.on_grid else 0


def _on_grid(steps, every):
    """Which of `steps` lie on a grid of `every` (elementwise; 0: every step)."""
    import numpy as np

    steps, every = np.asarray(steps), np.asarray(every)
    return (every == 0) | (steps % np.maximum(every, 1) == 0)


def grid_mask(spec: EvalSpec, steps):
    """Which evaluated steps of one run a statistic reads (`grid_every`)."""
    return _on_grid(steps, grid_every(spec))


def grid_rows(metrics, grid: dict[str, int]):
    """Rows of a metrics table (run_id, step, ...) on each run's evaluation grid: grid maps a
    run id to its `grid_every` (absent: every row). What the run summaries read
    (`grid_mask`), for the tables computed from metrics.csv."""
    every = metrics["run_id"].map(grid).fillna(0).astype(int).to_numpy()
    return metrics[_on_grid(metrics["step"].to_numpy(), every)]


@dataclass(frozen=True)
class RunSpec:
    task: TaskSpec = field(default_factory=TaskSpec)
    model: ModelSpec = field(default_factory=ModelSpec)
    train: TrainSpec = field(default_factory=TrainSpec)
    eval: EvalSpec = field(default_factory=EvalSpec)
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Every field, except implementation and new fields at their defaults (see above)."""
        d = dataclasses.asdict(self)
        for fields in (IMPLEMENTATION_FIELDS, NEW_FIELDS):
            for section, defaults in fields.items():
                for name, default in defaults.items():
                    if d[section][name] == default:
                        del d[section][name]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSpec:
        return cls(
            task=TaskSpec(**d["task"]),
            model=ModelSpec(**d["model"]),
            train=TrainSpec(**d["train"]),
            eval=EvalSpec(**d["eval"]),
            seed=int(d["seed"]),
        )

    @property
    def content_hash(self) -> str:
        """Hash of what the run computes. Implementation fields are excluded whatever their
        value: `fast` and `plain` train the same model to float32 rounding, so they are one
        run (one directory, one resume state) and every run id predating them is unchanged.
        """
        d = self.to_dict()
        for section, defaults in IMPLEMENTATION_FIELDS.items():
            for name in defaults:
                d[section].pop(name, None)
        blob = json.dumps(d, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:8]

    @functools.cached_property  # hashed once: the workflow asks for ids thousands of times
    def run_id(self) -> str:
        """Readable prefix (what usually varies) plus a hash of the whole spec."""
        t, m, o = self.task, self.model, self.train
        sharing = t.sharing if t.sharing != "supergroup" else f"G{t.n_supergroups}"
        return (
            f"{t.direction}-{m.label}-K{t.k}-G{t.n_groups}-z{t.z_length}-{sharing}"
            f"-p{t.label_noise:g}-lr{o.lr:g}-B{o.batch_size}-s{self.seed}"
            f"{'' if o.precision == 'fp32' else '-' + o.precision}-{self.content_hash}"
        )

    @property
    def dataset_id(self) -> str:
        """Runs that share task and seed share one dataset file."""
        return dataset_id(self.task, self.seed)


def dataset_id(task: TaskSpec, seed: int) -> str:
    """The id of the dataset of `task` drawn with `seed` (its file's name, and what the file
    and its sidecar record: `mbc.runs_pipeline.load_dataset` compares them)."""
    blob = json.dumps({"task": dataclasses.asdict(task), "seed": seed}, sort_keys=True)
    return (
        f"{task.direction}-K{task.k}-G{task.n_groups}-s{seed}-"
        + hashlib.sha256(blob.encode()).hexdigest()[:8]
    )


# tau.csv's columns of a run's spec. The first are the flat names tau.csv had before every
# field reached it (kept: figures, fits, statistics and readers of old tables use them);
# d, init_std (the resolved std), init_scale, n_supergroups (the selector sets) and
# sharing_factor are derived. Every other field is a column under its dotted name
# (`model.n_layers`, `train.weight_decay`), so any field can be a fit's x or a statistic's
# column without code.
FLAT_FIELDS = {
    "task": "task.direction", "model": "model.kind", "init": "model.init", "k": "task.k",
    "n_groups": "task.n_groups", "lr": "train.lr", "batch_size": "train.batch_size",
    "z_length": "task.z_length", "sharing": "task.sharing", "label_noise": "task.label_noise",
    "seed": "seed",
}  # fmt: skip
FLAT_COLUMNS = [
    "task", "model", "init", "init_std", "init_scale", "k", "n_groups", "d", "lr", "batch_size",
    "z_length", "sharing", "n_supergroups", "sharing_factor", "label_noise", "seed",
]  # fmt: skip
DOTTED_COLUMNS = [
    f"{section}.{f.name}"
    for section, cls in (
        ("task", TaskSpec),
        ("model", ModelSpec),
        ("train", TrainSpec),
        ("eval", EvalSpec),
    )
    for f in dataclasses.fields(cls)
    if f"{section}.{f.name}" not in FLAT_FIELDS.values()
]


SECTION_SPECS = {"task": TaskSpec, "model": ModelSpec, "train": TrainSpec, "eval": EvalSpec}
# the numeric ones: what a power-law fit may take as its x (config `fits[].x`)
NUMERIC_COLUMNS = [c for c in FLAT_COLUMNS if c not in ("task", "model", "init", "sharing")] + [
    c
    for c in DOTTED_COLUMNS
    if next(
        f.type
        for f in dataclasses.fields(SECTION_SPECS[c.split(".")[0]])
        if f.name == c.split(".")[1]
    )
    in ("int", "float", "float | None")
]


def field_value(spec: RunSpec, dotted: str) -> Any:
    """A spec field by its dotted name (`seed` has no section)."""
    node = spec
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def spec_columns(spec: RunSpec) -> dict[str, Any]:
    """Every field of `spec`, under its tau.csv column name (FLAT_COLUMNS, DOTTED_COLUMNS)."""
    t, m = spec.task, spec.model
    derived = {
        "init_std": m.weight_std,
        "init_scale": m.init_scale,
        "d": t.d,
        "n_supergroups": t.n_selector_sets,
        "sharing_factor": t.sharing_factor,
    }
    flat = {
        c: derived[c] if c in derived else field_value(spec, FLAT_FIELDS[c]) for c in FLAT_COLUMNS
    }
    return flat | {c: field_value(spec, c) for c in DOTTED_COLUMNS}
