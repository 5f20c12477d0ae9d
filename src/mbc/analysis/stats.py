"""Every measured statistic the verdicts and the scorecard read: results/statistics.csv.

One row per statistic: name, value, ci_low, ci_high, n, n_censored, n_diverged, what.
Fit exponents come from fits.csv (`fit:<name>`, `fit_r2:<name>`); every other statistic is
declared in config `statistics:` (name -> kind, experiments, columns, parameters) and
computed by its kind (`mbc.analysis.stat_kinds`). Nothing here knows the paper's values,
nor which experiment a statistic reads. Diverged runs are never censored data: config
`diverged:` declares their treatment (`mbc.analysis.diverged`; `exclude`: left out, counted
in n_diverged, said in `what`).
"""

from __future__ import annotations

import pandas as pd

from mbc.analysis import diverged as div
from mbc.analysis.config_sections import Bootstrap, Statistic, Statistics
from mbc.analysis.stat_kinds import KINDS, NAN, select

COLUMNS = ["name", "value", "ci_low", "ci_high", "n", "n_censored", "n_diverged", "what"]


def _row(name, vci, n, n_cens, what, n_div: int = 0) -> dict:
    v, lo, hi = vci
    if n_div:
        what += f"; {n_div} diverged run(s) left out"
    return dict(
        name=name,
        value=v,
        ci_low=lo,
        ci_high=hi,
        n=int(n),
        n_censored=int(n_cens),
        n_diverged=int(n_div),
        what=what,
    )


def runs_of(tau: pd.DataFrame, experiments: list[str]) -> pd.DataFrame:
    """The tau.csv rows of `experiments`, one per run (a run shared by two counts once)."""
    return tau[tau.experiment.isin(experiments)].drop_duplicates("run_id")


def fit_statistics(fits: pd.DataFrame) -> list[dict]:
    out = []
    for r in fits.itertuples():
        nd = int(getattr(r, "n_diverged", 0) or 0)
        n_out = getattr(r, "n_left_out", 0)
        n_out = 0 if pd.isna(n_out) else int(n_out)
        left = f"; {n_out} run(s) without a value left out" if n_out else ""
        out.append(
            _row(
                f"fit:{r.name}",
                (r.exponent, r.ci_low, r.ci_high),
                r.n,
                r.n_censored,
                f"exponent of {r.name} ({r.method}){left}",
                nd,
            )
        )
        # a Tobit fit's R^2 (least squares' measure, against censored points) means
        # nothing: no value, so that no table or macro prints one
        r2 = NAN if r.method == "tobit" else r.r2
        out.append(
            _row(f"fit_r2:{r.name}", (r2, NAN, NAN), r.n, r.n_censored, f"R^2 of {r.name}", nd)
        )
    return out


def what_text(st: dict) -> str:
    """A declared statistic's `what`, its placeholders filled from the entry (`{experiments}`:
    E1+E2): statistics.csv's column and the docs' table."""
    return st["what"].format(**st | {"experiments": "+".join(st.get("experiments", []))})


def statistic(declared: Statistic, tables: dict, boot: Bootstrap, diverged_ids: set) -> dict:
    """One declared statistic: its table's rows of its experiments (a run in two counts
    once), those meeting `where`, the diverged runs left out and counted; then its kind."""
    name, st = declared.name, declared.as_dict()  # the kinds read their parameters by key
    kind = KINDS[declared.kind]
    rows = tables[st.get("table", kind.table)]
    if st.get("experiments"):
        rows = runs_of(rows, st["experiments"])
    rows, nd = select(rows, st.get("where")), 0
    if not kind.keeps_diverged:
        rows, nd = div.drop(rows, diverged_ids)
    vci, n, n_cens, note = kind.fn(rows, st, boot)
    row = _row(name, vci, n, n_cens, what_text(st) + note, nd)
    return row | {"n_diverged": len(diverged_ids)} if kind.keeps_diverged else row


def compute_statistics(
    tau: pd.DataFrame,
    fits: pd.DataFrame,
    collective: pd.DataFrame,
    routing_ablation: pd.DataFrame,
    hessian: pd.DataFrame,
    boot: Bootstrap,
    declared: Statistics,
    diverged: str = "exclude",
) -> pd.DataFrame:
    """The fits' rows, then every statistic of config `statistics` (`declared`) in its
    order; a statistic without data is a row of NaNs (never dropped). diverged: config
    `diverged` (mbc.analysis.diverged)."""
    ids = div.check(tau, diverged, "statistics")
    tables = dict(
        tau=tau, collective=collective, hessian=hessian, routing_ablation=routing_ablation
    )
    rows = fit_statistics(fits)
    rows += [statistic(st, tables, boot, ids) for st in declared.declared]
    return pd.DataFrame(rows, columns=COLUMNS)
