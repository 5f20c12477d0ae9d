"""config.yaml's `diagnostics` and `plateau_sensitivity` sections as frozen, typed values,
owned here and registered with `mbc.config` (its `Config` builds them once, after the schema
check): the definitions a run's summary reads (`mbc.diagnostics.summary`) and the post-hoc
collective, routing and Hessian diagnostics over saved snapshots (E8-E10). Imports no torch:
every Snakemake start-up loads the config.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from mbc.core.config_references import ConfigError, dotted
from mbc.core.frozen import Frozen, freeze

# The Hessian estimators (`mbc.diagnostics.hessian` implements each, under this name; one row
# each in hessian.csv): what config `diagnostics.hessian.methods` may name.
HESSIAN_ESTIMATORS = ("lanczos", "power")
# The default of `diagnostics.hessian.methods`: the estimators every Hessian was measured with
# before config named them (a run id of those jobs depends on it: `HessianDiagnostic.__repr__`).
FIRST_HESSIAN_METHODS = HESSIAN_ESTIMATORS


def hessian_methods(cfg: dict) -> list[str]:
    """The estimators a raw config's `diagnostics.hessian.methods` asks for (its default
    when absent): hessian.csv's rows, and what its fits, statistics and figures may read."""
    hessian = (cfg.get("diagnostics") or {}).get("hessian") or {}
    return list(hessian.get("methods", FIRST_HESSIAN_METHODS))


def check_hessian_methods(cfg: dict, written=dotted) -> None:
    """Every estimator `diagnostics.hessian.methods` names is one of `HESSIAN_ESTIMATORS`
    (`mbc.config.load` runs it), so a misspelt one stops the workflow at start-up, not
    after training. An error names the key where the user wrote it (`written`)."""
    for method in hessian_methods(cfg):
        if method not in HESSIAN_ESTIMATORS:
            key = written(("diagnostics", "hessian", "methods"))
            why = f"no Hessian estimator of that name (known: {', '.join(HESSIAN_ESTIMATORS)})"
            raise ConfigError(key, method, why)


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
