"""Config values frozen as the user wrote them, and an id of their content.

Nested mappings a typed section keeps as written (a statistic's kind parameters, a
`where`, a scorecard reference) are frozen as `Frozen` pairs: the sections are hashable,
picklable (Snakemake pickles a rule's params into its script) and cannot be changed by
the code that reads them; `thaw` gives back exactly the dicts and lists of config.yaml.
Numbers are kept as written (an int stays an int): they reach the tables' cells.
"""

from __future__ import annotations

import hashlib
from typing import Any


class Frozen(tuple):
    """A mapping frozen as its (key, value) pairs, in the order written."""

    __slots__ = ()

    def get(self, key: str, default: Any = None) -> Any:
        return next((v for k, v in self if k == key), default)


def freeze(value: Any) -> Any:
    """dicts -> Frozen, lists -> tuples, recursively; scalars as they are."""
    if isinstance(value, dict):
        return Frozen((k, freeze(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """The inverse of `freeze`: thaw(freeze(x)) == x for a YAML value x."""
    if isinstance(value, Frozen):
        return {k: thaw(v) for k, v in value}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


def content_id(*sections: Any) -> str:
    """An id of the sections' content. Snakemake's rerun record keeps a rule's builtin
    params only (a dataclass it skips), so a rule passes this id beside the sections it
    hands its script: a changed section reruns the job."""
    return hashlib.sha256(repr(sections).encode()).hexdigest()[:16]
