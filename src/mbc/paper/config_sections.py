"""config.yaml's sections that the report reads, as frozen, typed values, owned here and
registered with `mbc.config` (its `Config` builds them once, after the schema check):
`report` (numbers.tex's macros, the labels) and `figures` (each figure's experiments, fits
and statistics by role: `mbc.paper.figure_tables`), with the words the report and the docs
give a cause of difference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mbc.core.frozen import Frozen, freeze, thaw

# config `explanation.cause` (the schema's enum) as the report and docs word it
CAUSES = {
    "scale": "a difference of scale",
    "seeds": "too few seeds",
    "definition": "a difference of definition",
    "untraced": "a reference traced to no run of the author's",
    "failure": "a failure to reproduce",
}


@dataclass(frozen=True)
class Macro:
    """One numbers.tex macro of config `report.macros`: a column of a statistics.csv row
    (`*` in the name: its first match in natural order, `_d2000` before `_d10000`)."""

    name: str
    statistic: str
    column: str = "value"


@dataclass(frozen=True)
class Report:
    """What the report prints from config: `report.macros`, the macros the paper's prose
    reads from statistics.csv (counts of runs, rows and verdicts are the report's own,
    `mbc.paper.report.numbers`), and `labels`, what its tables call a statistic or a fit."""

    macros: tuple[Macro, ...]
    labels: Frozen = Frozen()
    scale_note: str = ""  # config `report.scale_note`: a preset too small to decide a claim

    @classmethod
    def from_raw(cls, raw: dict, labels: dict | None = None) -> Report:
        macros = tuple(
            Macro(name, m) if isinstance(m, str) else Macro(name, **m)
            for name, m in raw.get("macros", {}).items()
        )
        return cls(macros, freeze(labels or {}), str(raw.get("scale_note", "")))

    def label_map(self) -> dict[str, str]:
        """The labels as config.yaml's mapping (`mbc.paper.report.readable` reads it)."""
        return thaw(self.labels)


@dataclass(frozen=True)
class FigureEntry:
    """One figure's entry of config `figures`: the experiments it draws, by the role it
    draws them in (role -> experiment ids), the fits whose lines it draws (role -> a `fits`
    name) and the statistics it prints (role -> a `statistics` name). The roles are the
    figure's (mbc.paper.figure_tables.FIGURE_ROLES)."""

    name: str
    experiments: Frozen = Frozen()
    fits: Frozen = Frozen()
    statistics: Frozen = Frozen()

    def experiments_of(self, role: str) -> list[str]:
        return list(self._role("experiments", role))

    def fit_of(self, role: str) -> str:
        return self._role("fits", role)

    def statistic_of(self, role: str) -> str:
        return self._role("statistics", role)

    def _role(self, kind: str, role: str) -> Any:
        value = getattr(self, kind).get(role)
        if value is None:  # the schema requires every role: only a hand-built entry lacks one
            raise KeyError(f"figure {self.name!r} has no {kind} role {role!r}")
        return value


@dataclass(frozen=True)
class Figures:
    """config `figures`: one entry per figure that has roles; any other figure's is empty."""

    entries: tuple[FigureEntry, ...]

    @classmethod
    def from_raw(cls, d: dict) -> Figures:
        return cls(
            tuple(
                FigureEntry(
                    name,
                    *(freeze(e.get(kind) or {}) for kind in ("experiments", "fits", "statistics")),
                )
                for name, e in d.items()
            )
        )

    def __getitem__(self, name: str) -> FigureEntry:
        return next((e for e in self.entries if e.name == name), FigureEntry(name))
