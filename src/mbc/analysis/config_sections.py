"""config.yaml's analysis sections as frozen, typed values, owned here and registered with
`mbc.config` (its `Config` builds them once, after the schema check): `bootstrap`; `fits`
(with `fit_differences` and `threshold_sensitivity`); `statistics` (each kind's parameters:
`mbc.analysis.stat_schema`); `scorecard` (the paper's claims and our own), `hypotheses`
(H1-H7) and `robustness` (E15's tables). Mappings kept as written are
`mbc.core.frozen.Frozen`. Imports no numpy, pandas or scipy: every Snakemake start-up loads
the config.
"""

from __future__ import annotations

from dataclasses import dataclass

from mbc.core.config_references import ConfigError, dotted
from mbc.core.frozen import Frozen, freeze, thaw
from mbc.diagnostics.config_sections import hessian_methods


@dataclass(frozen=True)
class Bootstrap:
    """config `bootstrap`: percentile bootstrap over runs (docs/method.md#fits)."""

    n_boot: int
    ci: float
    seed: int

    @classmethod
    def from_raw(cls, d: dict) -> Bootstrap:
        return cls(n_boot=int(d["n_boot"]), ci=float(d["ci"]), seed=int(d["seed"]))


@dataclass(frozen=True)
class Fit:
    """One entry of config `fits`: a power law of y against x over the runs of
    `experiments` (or the Hessian table's plateau rows of estimator `method`), one per `by`
    value if given."""

    name: str
    x: str
    experiments: tuple[str, ...] = ()
    table: str = "tau"
    y: str | None = None  # None: tau (anisotropy for the Hessian table)
    by: str | None = None
    method: str | None = None  # the Hessian table's estimator (None for tau.csv)

    @property
    def y_column(self) -> str:
        return self.y or ("anisotropy" if self.table == "hessian" else "tau")


@dataclass(frozen=True)
class FitDifference:
    """config `fit_differences`: the exponent of fit of[0] minus that of of[1]."""

    name: str
    of: tuple[str, str]


@dataclass(frozen=True)
class ThresholdSensitivity:
    """config `threshold_sensitivity` (E4): the tau law's exponent at other thresholds."""

    experiments: tuple[str, ...]
    x: str
    thresholds: tuple[float, ...]


@dataclass(frozen=True)
class Fits:
    """config `fits`, `fit_differences` and `threshold_sensitivity` (fits.csv and E4)."""

    declared: tuple[Fit, ...]
    differences: tuple[FitDifference, ...]
    threshold_sensitivity: ThresholdSensitivity

    @classmethod
    def from_raw(cls, raw: dict) -> Fits:
        t = raw["threshold_sensitivity"]
        return cls(
            declared=tuple(
                Fit(**{**f, "experiments": tuple(f.get("experiments", ()))}) for f in raw["fits"]
            ),
            differences=tuple(
                FitDifference(d["name"], tuple(d["of"])) for d in raw.get("fit_differences") or []
            ),
            threshold_sensitivity=ThresholdSensitivity(
                tuple(t["experiments"]), t["x"], tuple(t["thresholds"])
            ),
        )


@dataclass(frozen=True)
class Statistic:
    """One entry of config `statistics`: its name, its kind (`mbc.analysis.stat_kinds`) and
    the entry as declared (the kind's schema validated its parameters)."""

    name: str
    kind: str
    declared: Frozen

    def as_dict(self) -> dict:
        """The entry as config.yaml wrote it, for the kind's function (a fresh copy)."""
        return thaw(self.declared)


@dataclass(frozen=True)
class Statistics:
    """config `statistics`, in its order (statistics.csv's rows follow it)."""

    declared: tuple[Statistic, ...]

    @classmethod
    def from_raw(cls, d: dict) -> Statistics:
        return cls(tuple(Statistic(n, st["kind"], freeze(st)) for n, st in d.items()))


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


def check_hessian_rows(cfg: dict, written=dotted) -> None:
    """hessian.csv has a row per estimator: a fit of the Hessian table, and a statistic of
    it, read one estimator's rows, one that `diagnostics.hessian.methods` asks for
    (`mbc.config.load` runs it). An error names the key where the user wrote it."""
    methods = hessian_methods(cfg)
    for i, fit in enumerate(cfg.get("fits", [])):
        if fit.get("table") == "hessian" and fit["method"] not in methods:
            why = f"not in diagnostics.hessian.methods {methods}"
            raise ConfigError(f"fits[{i}].method", fit["method"], why)
    for name, st in (cfg.get("statistics") or {}).items():
        method = (st.get("where") or {}).get("method")
        if st.get("table") == "hessian" and method not in methods:
            key = written(("statistics", name, "where", "method"))
            raise ConfigError(key, method, f"need one of diagnostics.hessian.methods {methods}")
