"""config.yaml's sections that the verdicts and the report read, as frozen, typed values
(`mbc.core.sections.TypedSections` builds them): `scorecard` (the paper's claims and our
own), `hypotheses` (H1-H7), `robustness` (E15's tables), `report` (numbers.tex's macros)
and `figures` (each figure's experiments and fits by role).
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
class ScorecardRow:
    """One entry of config `scorecard`: a claim, the statistic that measures it (`ours`:
    our own definition of it, compared too), the paper's reference and the agreement rule.
    A claim of our own (`traced: ours`) has an `id` (E15's R1-R4)."""

    claim: str
    statistic: str
    paper_reference: Frozen
    agree: Frozen
    why: str = ""
    ours: str | None = None
    id: str | None = None
    explanation: Frozen = Frozen()  # {cause, text}: why it differs, where it does

    @property
    def is_ours(self) -> bool:
        return self.paper_reference.get("traced") == "ours"

    def reference(self) -> dict:
        return thaw(self.paper_reference)

    def rule(self) -> dict:
        return thaw(self.agree)


@dataclass(frozen=True)
class Scorecard:
    rows: tuple[ScorecardRow, ...]

    @classmethod
    def from_raw(cls, rows: list[dict]) -> Scorecard:
        return cls(
            tuple(
                ScorecardRow(
                    claim=r["claim"],
                    statistic=r["statistic"],
                    paper_reference=freeze(r["paper_reference"]),
                    agree=freeze(r["agree"]),
                    why=r.get("why", ""),
                    ours=r.get("ours"),
                    id=r.get("id"),
                    explanation=freeze(r.get("explanation") or {}),
                )
                for r in rows
            )
        )

    @property
    def ours(self) -> tuple[ScorecardRow, ...]:
        """The claims of our own (`traced: ours`), in config order."""
        return tuple(r for r in self.rows if r.is_ours)


@dataclass(frozen=True)
class HypothesisTest:
    """One decision rule (docs/method.md#hypotheses): the statistic (`*` globs) whose CI is
    held against `threshold` on the predicted side (`greater`, `less`), or inside
    center +/- threshold (`within`, the claims of our own); `ours`: our uniform version,
    decided by the same rule."""

    statistic: str
    direction: str
    threshold: float
    why: str = ""
    ours: str | None = None
    center: float = 0.0


@dataclass(frozen=True)
class Hypothesis:
    """config `hypotheses.<id>`: a candidate mechanism, its prediction and its tests; the
    paper's verdict ({verdict, says}: a labelled reference, never an input) and why ours
    differs ({cause, text}), where it does."""

    id: str
    mechanism: str
    prediction: str
    tests: tuple[HypothesisTest, ...]
    paper_verdict: Frozen = Frozen()
    explanation: Frozen = Frozen()


@dataclass(frozen=True)
class Hypotheses:
    """config `hypotheses` (H1-H7), in config order."""

    items: tuple[Hypothesis, ...]

    @classmethod
    def from_raw(cls, raw: dict) -> Hypotheses:
        return cls(
            tuple(
                Hypothesis(
                    hid,
                    h["mechanism"],
                    h["prediction"],
                    tuple(HypothesisTest(**t) for t in h["tests"]),
                    freeze(h.get("paper_verdict") or {}),
                    freeze(h.get("explanation") or {}),
                )
                for hid, h in raw.items()
            )
        )


@dataclass(frozen=True)
class Robustness:
    """config `robustness` (E15's tables; its statements are scorecard claims of our
    own): the init-scale sweep's experiment and the default-vs-alternative comparisons."""

    sweep: str
    compare: tuple[Frozen, ...]

    @classmethod
    def from_raw(cls, raw: dict) -> Robustness:
        return cls(raw["sweep"], freeze(raw["compare"]))


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
