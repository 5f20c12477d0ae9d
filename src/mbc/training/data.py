"""The "wind tunnel" task (docs/method.md#task): groups of K targets behind one base string.

Example (B_g, z_j) has target A_{g,j}. First characters of a group's targets are distinct,
so the first target token carries the whole log K of ambiguity; selectors are shared
across groups (or per supergroup / per group), so z alone says nothing about A.
Everything is drawn from one `numpy.random.Generator` seeded from the run seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mbc.core.spec import A_LEN, ALPHABET, B_LEN, BOS, CHAR0, EOS, SEP, TaskSpec

N_CHARS = len(ALPHABET)

# Independent random streams derived from one run seed (SeedSequence spawn keys).
STREAM_DATA, STREAM_INIT, STREAM_ORDER, STREAM_EVAL, STREAM_DIAG = range(5)
# the z-derangement of the training batch closing each logged window (mbc.training.author_log)
STREAM_WINDOW = 5


def stream_seed(seed: int, stream: int) -> int:
    """A 63-bit seed for one named stream of one run: no global RNG state is touched."""
    return int(np.random.SeedSequence([seed, stream]).generate_state(1, np.uint64)[0] >> 1)


def _unique_codes(rng: np.random.Generator, n: int, space: int) -> np.ndarray:
    """n distinct integers in [0, space), order random."""
    if n > space:
        raise ValueError(f"cannot draw {n} distinct strings from a space of {space}")
    codes = rng.integers(0, space, size=n)
    while True:
        _, first = np.unique(codes, return_index=True)
        dup = np.setdiff1d(np.arange(n), first)
        if dup.size == 0:
            return codes
        codes[dup] = rng.integers(0, space, size=dup.size)


def _digits(codes: np.ndarray, length: int) -> np.ndarray:
    """Base-36 digits of codes, most significant first: (n,) -> (n, length) token ids."""
    out = np.empty((*codes.shape, length), dtype=np.int64)
    c = codes.copy()
    for i in range(length - 1, -1, -1):
        out[..., i] = c % N_CHARS
        c //= N_CHARS
    return out + CHAR0


def _targets(rng: np.random.Generator, task: TaskSpec) -> np.ndarray:
    """(n_groups, K) codes of 4-char targets, unique dataset-wide."""
    g, k = task.n_groups, task.k
    suffix_space = N_CHARS ** (A_LEN - 1)
    if task.unique_first_chars:
        first = np.argsort(rng.random((g, N_CHARS)), axis=1)[:, :k]
    else:
        first = rng.integers(0, N_CHARS, size=(g, k))
    suffix = rng.integers(0, suffix_space, size=(g, k))
    while True:  # redraw suffixes of duplicates until every target is unique
        codes = (first * suffix_space + suffix).ravel()
        _, idx = np.unique(codes, return_index=True)
        dup = np.setdiff1d(np.arange(codes.size), idx)
        if dup.size == 0:
            return codes.reshape(g, k)
        flat = suffix.ravel()
        flat[dup] = rng.integers(0, suffix_space, size=dup.size)
        suffix = flat.reshape(g, k)


@dataclass(frozen=True)
class Dataset:
    """All examples of one task draw, as int64 tensors.

    tokens:        (D, T) training sequences (label noise applied to targets)
    clean_tokens:  (D, T) sequences with the true targets (used by every metric)
    group:         (D,)   candidate-set row of each example
    target_index:  (D,)   index of the true answer among candidates[group]
    candidates:    (n_groups, K, n_targets) candidate answers (+EOS) per group
    selectors:     (G, K, z_length) selector tokens of each selector list (bz_to_a)
    selector_set:  (n_groups,) which selector list each group uses
    """

    task: TaskSpec
    tokens: torch.Tensor
    clean_tokens: torch.Tensor
    group: torch.Tensor
    target_index: torch.Tensor
    candidates: torch.Tensor
    selectors: torch.Tensor
    selector_set: torch.Tensor

    def to_state(self) -> dict:
        state = {f: getattr(self, f) for f in self.__dataclass_fields__ if f != "task"}
        state["task"] = self.task.__dict__.copy()
        return state

    @classmethod
    def from_state(cls, state: dict) -> Dataset:
        return cls(
            task=TaskSpec(**state["task"]), **{k: v for k, v in state.items() if k != "task"}
        )


def _bases(rng: np.random.Generator, task: TaskSpec) -> np.ndarray:
    """(n_groups, B_LEN) token ids of the groups' distinct base strings: the data stream's
    first draw."""
    return _digits(_unique_codes(rng, task.n_groups, N_CHARS**B_LEN), B_LEN)


def base_strings(task: TaskSpec, seed: int) -> torch.Tensor:
    """(n_groups, B_LEN) the base strings of `build_dataset(task, seed)`, group by group,
    without the rest of the dataset (the identity linear baseline's e_B vocabulary)."""
    rng = np.random.default_rng(stream_seed(seed, STREAM_DATA))
    return torch.as_tensor(_bases(rng, task), dtype=torch.int64)


def build_dataset(task: TaskSpec, seed: int) -> Dataset:
    """Generate the dataset of `task` from the data stream of run seed `seed`."""
    rng = np.random.default_rng(stream_seed(seed, STREAM_DATA))
    g, k = task.n_groups, task.k
    bases = _bases(rng, task)  # (g, 6)
    answers = _digits(_targets(rng, task), A_LEN)  # (g, k, 4)
    n_sets = task.n_selector_sets
    selector_set = rng.permutation(g) % n_sets  # balanced random supergroups
    z_space = N_CHARS**task.z_length
    selectors = np.stack(
        [_digits(_unique_codes(rng, k, z_space), task.z_length) for _ in range(n_sets)]
    )

    if task.direction == "bz_to_a":
        gi, ki = np.divmod(np.arange(g * k), k)
        clean_answer = answers[gi, ki]
        answer = clean_answer
        if task.label_noise > 0:
            # Replace the target once, at build time, by another target of the same group.
            noisy = rng.random(g * k) < task.label_noise
            other = (ki + rng.integers(1, k, size=g * k)) % k
            answer = np.where(noisy[:, None], answers[gi, other], clean_answer)
        z = selectors[selector_set[gi], ki]
        col = lambda v: np.full((g * k, 1), v)  # noqa: E731
        prefix = np.concatenate([col(BOS), bases[gi], col(SEP), z, col(SEP)], axis=1)
        clean = np.concatenate([prefix, clean_answer, col(EOS)], axis=1)
        train = np.concatenate([prefix, answer, col(EOS)], axis=1)
        candidates = np.concatenate([answers, np.full((g, k, 1), EOS)], axis=2)
        group, target_index = gi, ki
    else:  # a_to_b / az_to_b: input A (and z), target B; candidates: bases of K groups
        if g < k:
            raise ValueError(
                f"{task.direction} needs n_groups >= K to form candidate blocks (got {g} < {k})"
            )
        gi, ki = np.divmod(np.arange(g * k), k)
        col = lambda v: np.full((g * k, 1), v)  # noqa: E731
        if task.direction == "az_to_b":  # [BOS] A [SEP] z [SEP] B [EOS]
            z = selectors[selector_set[gi], ki]
            parts = [col(BOS), answers[gi, ki], col(SEP), z, col(SEP), bases[gi], col(EOS)]
        else:  # [BOS] A [SEP] B [EOS]
            parts = [col(BOS), answers[gi, ki], col(SEP), bases[gi], col(EOS)]
        clean = np.concatenate(parts, axis=1)
        train = clean
        perm = rng.permutation(g)
        pos = np.empty(g, dtype=np.int64)
        pos[perm] = np.arange(g)
        # Candidates of group g: the K consecutive groups of a random permutation that hold
        # g; a last partial block borrows from the block before it.
        start = np.minimum((pos // k) * k, g - k)
        members = perm[start[:, None] + np.arange(k)]
        cand_bases = bases[members]  # (g, k, 6)
        candidates = np.concatenate([cand_bases, np.full((g, k, 1), EOS)], axis=2)
        group = gi
        target_index = np.argmax(members[gi] == gi[:, None], axis=1)

    t = lambda a: torch.as_tensor(np.ascontiguousarray(a), dtype=torch.int64)  # noqa: E731
    return Dataset(
        task=task,
        tokens=t(train),
        clean_tokens=t(clean),
        group=t(group),
        target_index=t(target_index),
        candidates=t(candidates),
        selectors=t(selectors),
        selector_set=t(selector_set),
    )


def decode(tokens: torch.Tensor) -> str:
    """Human-readable form of one sequence (for logs and tests)."""
    names = {0: "_", BOS: "^", EOS: "$", SEP: "|"}
    return "".join(
        names.get(int(i), ALPHABET[int(i) - CHAR0] if int(i) >= CHAR0 else "?") for i in tokens
    )


class BatchOrder:
    """Batches without replacement within an epoch: a seeded permutation per epoch.

    The stream of examples is perm_0 ++ perm_1 ++ ...; step s (1-based) takes positions
    [(s-1) B, s B). Every batch is full and each epoch visits every example once.
    """

    def __init__(self, d: int, batch_size: int, seed: int, device: torch.device):
        self.d, self.b, self.seed, self.device = d, batch_size, seed, device
        self._cache: dict[int, torch.Tensor] = {}

    def _perm(self, epoch: int) -> torch.Tensor:
        if epoch not in self._cache:
            g = torch.Generator().manual_seed(
                stream_seed(self.seed, STREAM_ORDER * 1_000_003 + epoch)
            )
            self._cache = {epoch: torch.randperm(self.d, generator=g).to(self.device)} | {
                e: p for e, p in self._cache.items() if e == epoch - 1
            }
        return self._cache[epoch]

    def indices(self, step: int) -> torch.Tensor:
        start = (step - 1) * self.b
        e0, o0 = divmod(start, self.d)
        out, need, e, o = [], self.b, e0, o0
        while need > 0:
            take = min(need, self.d - o)
            out.append(self._perm(e)[o : o + take])
            need, e, o = need - take, e + 1, 0
        return out[0] if len(out) == 1 else torch.cat(out)
