"""config.yaml's analysis sections as frozen, typed values (`mbc.core.config.load` builds
them once, after the schema check): `bootstrap`; `diagnostics` (the definitions a run's
summary reads, and the post-hoc collective, routing and hessian diagnostics); `fits` (with
`fit_differences` and `threshold_sensitivity`); `statistics`; `plateau_sensitivity`; and,
from `mbc.core.report_sections`, `scorecard`, `hypotheses`, `robustness`, `report` and
`figures`. `mbc.pipeline`, `mbc.pipeline_report` and `mbc.paper.figures` take these, not
the config's dicts. Mappings kept as written are `mbc.core.frozen.Frozen`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields

from mbc.core.frozen import Frozen, content_id, freeze, thaw
from mbc.core.report_sections import Figures, Hypotheses, Report, Robustness, Scorecard


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
class Plateau:
    """config `diagnostics.plateau`: the window whose mean L_cand is the plateau height
    (docs/method.md#plateau-height)."""

    start_fraction: float
    onset_fraction: float
    end_at_z_onset: bool = False


@dataclass(frozen=True)
class Lead:
    """config `diagnostics.lead`: the onsets whose difference is the lead of delta_z over
    the loss (docs/method.md#lead)."""

    delta_z_onset: float
    loss_onset_fraction: float


@dataclass(frozen=True)
class Transition:
    """config `diagnostics.transition`: the author's transition window, last
    L_cand > start_fraction log K -> first L_cand < end_fraction log K
    (docs/method.md#transition-window)."""

    start_fraction: float
    end_fraction: float


@dataclass(frozen=True)
class Dip:
    """config `diagnostics.dip` (E11's duration): first L_cand < start_fraction log K ->
    first L_cand < end_nats. Without the key, the author's: 1.0 and 0.5 nats
    (docs/method.md#e11-duration)."""

    start_fraction: float = 1.0
    end_nats: float = 0.5


@dataclass(frozen=True)
class Lag:
    """config `diagnostics.lag` (the author's E14 statistic, `compute_lag_metric`): the first
    logged step whose running-mean first-target loss is below `fraction` x its own first
    logged value. Without the key, his 0.1."""

    fraction: float = 0.1


@dataclass(frozen=True)
class Summary:
    """The per-run quantities' definitions a run's summary.json reads (`diagnostics.plateau`,
    `lead`, `first_target.threshold`, `transition`, `dip`, `lag`; `mbc.diagnostics.summary`)."""

    plateau: Plateau
    lead: Lead
    first_target_threshold: float
    transition: Transition
    dip: Dip
    lag: Lag = Lag()

    @classmethod
    def from_raw(cls, d: dict) -> Summary:
        return cls(
            plateau=Plateau(**d["plateau"]),
            lead=Lead(**d["lead"]),
            first_target_threshold=d["first_target"]["threshold"],
            transition=Transition(**d["transition"]),
            dip=Dip(**d["dip"]) if "dip" in d else Dip(),
            lag=Lag(**d["lag"]) if "lag" in d else Lag(),
        )


@dataclass(frozen=True)
class CollectiveDiagnostic:
    """config `diagnostics.collective` (E8): per-group accuracy around tau
    (docs/method.md#collective-transition)."""

    source: str
    where: Frozen
    n_groups: int
    accurate: float
    tau_fractions: tuple[float, ...]


@dataclass(frozen=True)
class RoutingDiagnostic:
    """config `diagnostics.routing` (E9): attention to z and head ablations at named phases
    (phase name -> fraction of tau; docs/method.md#routing-head)."""

    source: str
    where: Frozen
    n_contexts: int
    phases: Frozen


# the estimators every Hessian was measured with before config named them
FIRST_HESSIAN_METHODS = ("lanczos", "power")


@dataclass(frozen=True, repr=False)
class HessianDiagnostic:
    """config `diagnostics.hessian` (E10): the estimators `methods` names
    (`mbc.diagnostics.hessian.ESTIMATORS`: Lanczos, n_iter steps; the author's power
    iteration, power_*) at fractions of tau, on a fixed subsample of n_examples. Without
    power_cos the power iteration stops by our residual rule
    (`mbc.diagnostics.spectrum._power`; docs/method.md#hessian)."""

    source: str
    where: Frozen
    n_examples: int
    n_iter: int
    power_n_iter: int
    tol: float
    tau_fractions: tuple[float, ...]
    plateau_fraction: float
    power_cos: float | None = None
    power_min_iter: int = 1
    power_shift_offset: float = 0.0
    methods: tuple[str, ...] = FIRST_HESSIAN_METHODS

    def __repr__(self) -> str:
        # The rule's rerun id is this repr (`mbc.core.frozen.content_id`). `methods` came
        # after Hessians were measured with FIRST_HESSIAN_METHODS: at that value it is left
        # out, so those jobs keep the id they recorded and are not recomputed.
        shown = [f for f in fields(self) if f.name != "methods"]
        if self.methods != FIRST_HESSIAN_METHODS:
            shown.append(next(f for f in fields(self) if f.name == "methods"))
        body = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in shown)
        return f"{type(self).__qualname__}({body})"


@dataclass(frozen=True)
class Diagnostics:
    """config `diagnostics`: the definitions a run's summary reads, and the post-hoc
    diagnostics over saved snapshots (E8-E10)."""

    summary: Summary
    collective: CollectiveDiagnostic
    routing: RoutingDiagnostic
    hessian: HessianDiagnostic

    @classmethod
    def from_raw(cls, d: dict) -> Diagnostics:
        c, r, h = d["collective"], d["routing"], d["hessian"]
        hessian = HessianDiagnostic(
            source=h["source"],
            where=freeze(h.get("where") or {}),
            n_examples=int(h["n_examples"]),
            n_iter=int(h["n_iter"]),
            power_n_iter=int(h["power_n_iter"]),
            tol=float(h["tol"]),
            tau_fractions=tuple(h["tau_fractions"]),
            plateau_fraction=h["plateau_fraction"],
            power_cos=None if h.get("power_cos") is None else float(h["power_cos"]),
            power_min_iter=int(h.get("power_min_iter", 1)),
            power_shift_offset=float(h.get("power_shift_offset", 0.0)),
            methods=tuple(h.get("methods", FIRST_HESSIAN_METHODS)),
        )
        return cls(
            summary=Summary.from_raw(d),
            collective=CollectiveDiagnostic(
                source=c["source"],
                where=freeze(c.get("where") or {}),
                n_groups=int(c["n_groups"]),
                accurate=float(c["accurate"]),
                tau_fractions=tuple(c["tau_fractions"]),
            ),
            routing=RoutingDiagnostic(
                source=r["source"],
                where=freeze(r.get("where") or {}),
                n_contexts=int(r["n_contexts"]),
                phases=freeze(r["phases"]),
            ),
            hessian=hessian,
        )


@dataclass(frozen=True)
class PlateauSensitivity:
    """config `plateau_sensitivity`: plateau height / log K of `experiments`' runs with the
    window ended at other delta_z onsets; in band when within `band`."""

    experiments: tuple[str, ...]
    delta_z_onsets: tuple[float, ...]
    band: tuple[float, float]

    @classmethod
    def from_raw(cls, d: dict) -> PlateauSensitivity:
        return cls(tuple(d["experiments"]), tuple(d["delta_z_onsets"]), tuple(d["band"]))


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


class TypedSections:
    """The typed sections of `mbc.core.config.Config`, built from its `raw` on first use
    (`load` builds them all, so a missing key stops the workflow at start-up)."""

    raw: dict
    SECTIONS = (
        "bootstrap", "diagnostics", "fits", "statistics", "scorecard", "plateau_sensitivity",
        "robustness", "report", "hypotheses", "figures",
    )  # fmt: skip

    @functools.cached_property
    def bootstrap(self) -> Bootstrap:
        return Bootstrap.from_raw(self.raw["bootstrap"])

    @functools.cached_property
    def diagnostics(self) -> Diagnostics:
        return Diagnostics.from_raw(self.raw["diagnostics"])

    @functools.cached_property
    def fits(self) -> Fits:
        return Fits.from_raw(self.raw)

    @functools.cached_property
    def statistics(self) -> Statistics:
        return Statistics.from_raw(self.raw["statistics"])

    @functools.cached_property
    def scorecard(self) -> Scorecard:
        return Scorecard.from_raw(self.raw["scorecard"])

    @functools.cached_property
    def robustness(self) -> Robustness:
        return Robustness.from_raw(self.raw["robustness"])

    @functools.cached_property
    def hypotheses(self) -> Hypotheses:
        return Hypotheses.from_raw(self.raw["hypotheses"])

    @functools.cached_property
    def report(self) -> Report:
        return Report.from_raw(self.raw.get("report", {}), self.raw.get("labels", {}))

    @functools.cached_property
    def plateau_sensitivity(self) -> PlateauSensitivity:
        return PlateauSensitivity.from_raw(self.raw["plateau_sensitivity"])

    @functools.cached_property
    def figures(self) -> Figures:
        return Figures.from_raw(self.raw["figures"])

    @property
    def diverged(self) -> str:
        """config `diverged`: how every statistic, fit and table treats a diverged run."""
        return self.raw.get("diverged") or "exclude"

    def config_ids(self) -> dict[str, str]:
        """rule -> its config id (`_config_ids`), computed once per config."""
        return dict(self._config_ids)

    @functools.cached_property
    def _config_ids(self) -> dict[str, str]:
        """rule -> the content id of the config sections (and parameters) the rule reads: its
        `config_id` param, which its script records in every table's sidecar
        (`mbc.core.artifacts.built_under`) and the run store in each entry; the start-up
        check compares them with this config's, whatever `.snakemake/` holds."""
        d = self.diagnostics
        return {
            "summarize_run": content_id(d.summary),
            "plateau_sensitivity": content_id(self.plateau_sensitivity, d.summary),
            "collective": content_id(d.collective),
            "routing": content_id(d.routing),
            "hessian": content_id(d.hessian),
            "fits": content_id(self.fits, self.bootstrap, self.diverged),
            "statistics": content_id(self.statistics, self.bootstrap, self.diverged),
            "hypotheses": content_id(self.hypotheses),
            "robustness": content_id(
                self.robustness, self.scorecard.ours, self.bootstrap, self.diverged
            ),
            "scorecard": content_id(self.scorecard),
            "tex": content_id(self.report, self.questions()),
        }

    def figure_config_id(self, figure: str) -> str:
        """The figure rule's config id: its `figures:` entry."""
        return content_id(self.figures[figure])

    def missing_section_key(self) -> tuple[str, str] | None:
        """(section, the key it lacks) for the first section that cannot be built, else None."""
        for section in self.SECTIONS:
            try:
                getattr(self, section)
            except KeyError as exc:
                return section, exc.args[0]
            except TypeError as exc:  # a typed entry built from an incomplete mapping
                return section, str(exc).split(": ", 1)[-1]
        return None
