"""Every measured statistic the verdicts and the scorecard read: results/statistics.csv.

One row per statistic: name, value, ci_low, ci_high, n, n_censored, n_diverged, what.
Diverged runs are never censored data: config `diverged:` declares their treatment
(`mbc.analysis.diverged`; `exclude`: left out, counted in n_diverged, said in `what`).
Fit exponents come from fits.csv (`fit:<name>`, `fit_r2:<name>`); the others are computed here from the
tidy tables, with percentile bootstrap CIs over independent runs. Nothing here knows
the paper's values, nor which experiment a statistic reads: config `statistics.sources`
and `statistics.plateau_heights` name them, and `diagnostics.lead.source` the lead's.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from mbc.analysis import diverged as div
from mbc.core.spec import REVERSE_DIRECTIONS

COLUMNS = ["name", "value", "ci_low", "ci_high", "n", "n_censored", "n_diverged", "what"]
NAN = float("nan")


def _boot(values: np.ndarray, fn, boot: dict) -> tuple:
    """(value, ci_low, ci_high) of fn(values), percentile bootstrap over rows (= runs)."""
    values = np.asarray(values, dtype=float)
    if values.size == 0 or not np.isfinite(values).any():
        return NAN, NAN, NAN
    v = float(fn(values))
    n = len(values)  # rows: a 2-D array resamples whole rows (paired values)
    if n < 2:
        return v, NAN, NAN
    rng = np.random.default_rng(boot["seed"])
    idx = rng.integers(0, n, size=(boot["n_boot"], n))
    reps = np.array([fn(values[i]) for i in idx], dtype=float)
    reps = reps[np.isfinite(reps)]
    a = (1 - boot["ci"]) / 2
    if reps.size < boot["n_boot"] / 2:
        return v, NAN, NAN
    return v, float(np.quantile(reps, a)), float(np.quantile(reps, 1 - a))


def _row(name, vci, n, n_cens, what, n_div: int = 0) -> dict:
    v, lo, hi = vci
    if n_div:
        what += f"; {n_div} diverged run(s) left out"
    return dict(name=name, value=v, ci_low=lo, ci_high=hi, n=int(n), n_censored=int(n_cens),
                n_diverged=int(n_div), what=what)  # fmt: skip


def runs_of(tau: pd.DataFrame, experiments: list[str]) -> pd.DataFrame:
    """The tau.csv rows of `experiments`, one per run (a run shared by two counts once)."""
    return tau[tau.experiment.isin(experiments)].drop_duplicates("run_id")


def kept_runs(tau: pd.DataFrame, experiments: list[str]) -> tuple[pd.DataFrame, int]:
    """`runs_of` without the diverged runs, and how many those were (`diverged: exclude`;
    compute_statistics has applied the policy)."""
    return div.drop(runs_of(tau, experiments), div.diverged_ids(tau))


def _names(experiments: list[str]) -> str:
    return "+".join(experiments)


def _tau_or_bound(df: pd.DataFrame, column: str = "tau") -> np.ndarray:
    """tau (or another waiting time), or the step budget for a censored run (a lower
    bound on it)."""
    return df[column].astype("Float64").fillna(df["steps"]).to_numpy(float)


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    if len(np.unique(x)) < 2 or len(np.unique(y)) < 2:
        return NAN
    return float(sps.spearmanr(x, y).statistic)


def fit_statistics(fits: pd.DataFrame) -> list[dict]:
    out = []
    for r in fits.itertuples():
        nd = int(getattr(r, "n_diverged", 0) or 0)
        out.append(_row(f"fit:{r.name}", (r.exponent, r.ci_low, r.ci_high), r.n, r.n_censored,
                        f"exponent of {r.name} ({r.method})", nd))  # fmt: skip
        out.append(
            _row(f"fit_r2:{r.name}", (r.r2, NAN, NAN), r.n, r.n_censored, f"R^2 of {r.name}", nd)
        )
    return out


def compute_statistics(
    tau: pd.DataFrame, fits: pd.DataFrame, collective: pd.DataFrame, routing_ablation: pd.DataFrame,
    hessian: pd.DataFrame, boot: dict, cfg: dict, lead_source: str, diverged: str = "exclude",
) -> pd.DataFrame:  # fmt: skip
    """All statistics; a statistic without data is a row of NaNs (never dropped).

    cfg: config `statistics` (the experiments each statistic reads: `sources`,
    `plateau_heights`); lead_source: `diagnostics.lead.source`, the lead's experiment;
    diverged: config `diverged` (mbc.analysis.diverged)."""
    ids = div.check(tau, diverged, "statistics")
    rows = fit_statistics(fits)
    src = cfg["sources"]

    for name, experiments in cfg["plateau_heights"].items():
        e = tau[tau.experiment.isin(experiments) & (tau.k >= 3) & (tau.model == "transformer")]
        e, nd = div.drop(e.drop_duplicates("run_id"), ids)
        h = e.height_over_log_k.dropna().to_numpy(float)
        rows.append(_row(name, _boot(h, np.mean, boot), h.size, int(e.censored.sum()),
                         f"mean plateau height / log K over {_names(experiments)} runs (K >= 3)", nd))  # fmt: skip

    e1 = tau[(tau.experiment == lead_source) & (tau.k >= 3)].drop_duplicates("run_id")
    e1, nd1 = div.drop(e1, ids)

    lead = e1.lead_fraction.dropna().to_numpy(float)
    rows.append(_row("lead_fraction_mean", _boot(lead, np.mean, boot), lead.size, int(e1.censored.sum()),
                     f"mean (loss onset - delta_z onset) / loss onset over {lead_source} runs (L_cand, delta_z)", nd1))  # fmt: skip
    lead1 = e1.lead_fraction_first.dropna().to_numpy(float)
    rows.append(_row("lead_fraction_first_mean", _boot(lead1, np.mean, boot), lead1.size,
                     int(e1.first_target_censored.sum()),
                     f"mean lead fraction over {lead_source} runs on the first-target loss L1 and its delta_z", nd1))  # fmt: skip

    logged = e1[e1.lead_log_measured.astype("boolean").fillna(False).astype(bool)] if (
        "lead_log_measured" in e1) else e1.iloc[:0]  # fmt: skip
    lead_log = logged.lead_fraction_log.dropna().to_numpy(float)
    rows.append(_row("lead_fraction_log_mean", _boot(lead_log, np.mean, boot), lead_log.size,
                     len(e1) - len(logged),
                     f"mean lead fraction over {lead_source} runs on the training log (author's: "
                     "running-mean L1 per window, last batch's shuffled L1 minus it); n_censored: "
                     "runs whose log has no such series (not measured)", nd1))  # fmt: skip
    for name, col, series in (("lead_fraction_k_spearman", "lead_fraction", "L_cand, delta_z"),
                              ("lead_fraction_first_k_spearman", "lead_fraction_first",
                               "L1, delta_z_first, fixed batch"),
                              ("lead_fraction_log_k_spearman", "lead_fraction_log",
                               "the training log, author's")):  # fmt: skip
        rows.append(lead_trend(e1, col, boot, name, f"{series}; {lead_source} runs", nd1))

    collective, ndc = div.drop(collective, ids)
    frac = collective_fraction_at(collective, cfg["collective_fraction"])
    rows.append(_row("collective_frac_accurate_half_tau", _boot(frac, np.mean, boot), frac.size, 0,
                     f"mean fraction of groups >= accurate at {cfg['collective_fraction']:g} tau", ndc))  # fmt: skip

    e12, nd12 = kept_runs(tau, src["label_noise"])
    for name, col, cens in (("label_noise_spearman_abs", "tau", "censored"),
                            ("label_noise_spearman_abs_first", "first_target_tau",
                             "first_target_censored")):  # fmt: skip
        x, y = e12.label_noise.to_numpy(float), _tau_or_bound(e12, col)
        pairs = np.column_stack([x, y]) if len(e12) else np.empty((0, 2))
        rho = (
            _boot(pairs, lambda p: abs(_spearman(p[:, 0], p[:, 1])), boot)
            if len(e12)
            else (NAN,) * 3
        )
        rows.append(_row(name, rho, len(e12), int(e12[cens].sum()) if len(e12) else 0,
                         f"|Spearman rho| of {col} (censored: budget) with label noise p, "
                         f"{_names(src['label_noise'])}", nd12))  # fmt: skip

    e13 = runs_of(tau, src["linear"])
    e13, nd13 = div.drop(e13[e13.model == "linear"], ids)
    trans = (~e13.censored.astype(bool)).to_numpy(float)
    rows.append(_row("linear_transition_fraction", _boot(trans, np.mean, boot), len(e13),
                     int(e13.censored.sum()), "fraction of linear-baseline runs that cross the threshold", nd13))  # fmt: skip
    final = (e13.final_candidate_loss / np.log(e13.k)).to_numpy(float)
    rows.append(_row("linear_final_lcand_over_log_k", _boot(final, np.mean, boot), len(e13),
                     int(e13.censored.sum()), "final L_cand / log K of the linear baseline", nd13))  # fmt: skip

    rows.append(direction_ratio(tau, src["direction"], boot))
    lr, batch = src["lr"], src["batch"]
    rows.append(extreme_ratio(tau, lr, "lr", "tau", boot, "lr_tau_ratio",
                              f"tau at the largest lr / tau at the smallest lr ({_names(lr)})"))  # fmt: skip
    rows.append(extreme_ratio(tau, batch, "batch_size", "examples", boot, "batch_examples_ratio",
                              f"examples to tau at the smallest batch / at the largest ({_names(batch)})",
                              invert=True))  # fmt: skip
    rows.append(lr_duration_ratio(tau, lr, cfg.get("lr_pair", {}), boot))
    if "sharing" in src:
        rows.append(sharing_beta(tau, src["sharing"], cfg.get("sharing_fit", {}), boot))
    rows.extend(batch_pair_ratios(tau, batch, cfg.get("batch_pair", {}), boot))

    hessian, ndh = div.drop(hessian, ids)
    routing_ablation, ndr = div.drop(routing_ablation, ids)
    plat = hessian[hessian.phase == "plateau"] if not hessian.empty else hessian
    an = plat.anisotropy.to_numpy(float) if not plat.empty else np.array([])
    an = an[np.isfinite(an)]
    rows.append(_row("anisotropy_plateau_median", _boot(an, np.median, boot), an.size, 0,
                     "median |lambda_max / lambda_min| at the plateau phase, Lanczos (E10)", ndh))  # fmt: skip
    anp = plat.anisotropy_power.to_numpy(float) if "anisotropy_power" in plat else np.array([])
    anp = anp[np.isfinite(anp)]
    rows.append(_row("anisotropy_plateau_median_power", _boot(anp, np.median, boot), anp.size, 0,
                     "median |lambda_max / lambda_min| at the plateau phase, power iteration (E10)", ndh))  # fmt: skip
    conv = plat.converged_min.astype(bool).to_numpy(float) if not plat.empty else np.array([])
    rows.append(_row("lambda_min_converged_fraction", (float(conv.mean()) if conv.size else NAN, NAN, NAN),
                     conv.size, 0, "fraction of plateau lambda_min estimates that converged", ndh))  # fmt: skip

    layer = routing_head_layer(routing_ablation)
    rows.append(_row("routing_head_layer_mode", (layer, NAN, NAN), routing_ablation.run_id.nunique()
                     if not routing_ablation.empty else 0, 0,
                     "most common layer of the head whose zero-ablation removes most delta_z (mid)", ndr))  # fmt: skip
    rows.append(_row("n_runs", (float(tau.run_id.nunique()), NAN, NAN), tau.run_id.nunique(),
                     int(tau.drop_duplicates("run_id").censored.sum()),
                     "distinct training runs (the diverged ones included)", 0) | {"n_diverged": len(ids)})  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def lead_trend(
    runs: pd.DataFrame, column: str, boot: dict, name: str, what: str, n_div: int = 0
) -> dict:
    """Spearman rho of the lead fraction (`column`) with K over the runs that measured it,
    percentile bootstrap over runs: its sign says whether the lead grows with K (the paper's
    text), its CI whether the data decide it."""
    e = runs[["k", column]].dropna() if column in runs else pd.DataFrame(columns=["k", column])
    pairs = e.to_numpy(float) if len(e) else np.empty((0, 2))
    vci = _boot(pairs, lambda p: _spearman(p[:, 0], p[:, 1]), boot) if len(e) else (NAN,) * 3
    return _row(name, vci, len(e), 0, f"Spearman rho of the lead fraction with K ({what})", n_div)


def collective_fraction_at(summary: pd.DataFrame, fraction: float) -> np.ndarray:
    """Per run, frac_accurate at the checkpoint whose tau_fraction is nearest `fraction`."""
    if summary.empty:
        return np.array([])
    out = []
    for _, g in summary.groupby("run_id"):
        out.append(float(g.loc[(g.tau_fraction - fraction).abs().idxmin(), "frac_accurate"]))
    return np.array(out)


def direction_ratio(tau: pd.DataFrame, experiments: list[str], boot: dict) -> dict:
    """Geometric mean over (K, seed) of tau(reverse) / tau(bz_to_a) over the runs of
    `experiments` (the author's E14; censored: bound); the reverse task is az_to_b (the
    author's) or, failing that, a_to_b."""
    e14, nd = kept_runs(tau, experiments)
    names = _names(experiments)
    if e14.empty:
        return _row("direction_ratio", (NAN,) * 3, 0, 0, f"tau(A->B) / tau((B,z)->A), {names}", nd)
    e14 = e14.assign(t=_tau_or_bound(e14))
    piv = e14.pivot_table(index=["k", "seed"], columns="task", values="t", aggfunc="first")
    reverse = next((d for d in REVERSE_DIRECTIONS if d in piv.columns), None)
    if reverse is None or "bz_to_a" not in piv.columns:
        return _row("direction_ratio", (NAN,) * 3, 0, 0, f"tau(A->B) / tau((B,z)->A), {names}", nd)
    logr = np.log(piv[reverse] / piv["bz_to_a"]).dropna().to_numpy()
    v, lo, hi = _boot(logr, np.mean, boot)
    return _row("direction_ratio", (math.exp(v), math.exp(lo), math.exp(hi)), logr.size,
                int(e14.censored.sum()), f"geometric mean tau(A->B) / tau((B,z)->A) over K, seeds ({names})", nd)  # fmt: skip


def _ratio_of_means(a: np.ndarray, b: np.ndarray, boot: dict) -> tuple[float, float, float]:
    """mean(a) / mean(b) with a bootstrap CI resampling the two groups of runs apart."""
    if a.size == 0 or b.size == 0:
        return NAN, NAN, NAN
    rng = np.random.default_rng(boot["seed"])
    reps = [
        rng.choice(a, a.size).mean() / rng.choice(b, b.size).mean() for _ in range(boot["n_boot"])
    ]
    q = (1 - boot["ci"]) / 2
    ci = (
        (float(np.quantile(reps, q)), float(np.quantile(reps, 1 - q)))
        if a.size + b.size > 2
        else (NAN, NAN)
    )
    return float(a.mean() / b.mean()), *ci


def lr_duration_ratio(tau: pd.DataFrame, experiments: list[str], cfg: dict, boot: dict) -> dict:
    """The author's learning-rate statistic (his E6) over the runs of `experiments`: mean
    transition-window duration at lr `lrs[0]` over that at `lrs[1]` (his 3.6 = lr 2e-3 over
    lr 3e-4). A duration is measured only once the window closes: with a run of the pair
    censored, not measured."""
    name = "lr_duration_ratio"
    e, nd = kept_runs(tau, experiments)
    names = _names(experiments)
    if e.empty or not cfg.get("lrs"):
        return _row(name, (NAN,) * 3, 0, 0, f"{names} transition-window duration ratio", nd)
    hi, lo = cfg["lrs"]
    pair = e[np.isclose(e.lr, hi) | np.isclose(e.lr, lo)]
    n_cens = int(pair.transition_censored.astype(bool).sum())
    what = f"transition-window duration (0.95 -> 0.05 log K), lr {hi:g} / lr {lo:g} ({names})"
    dur = lambda lr: pair.loc[np.isclose(pair.lr, lr), "transition_duration"]  # noqa: E731
    if n_cens or dur(hi).empty or dur(lo).empty:
        return _row(
            name, (NAN,) * 3, len(pair), n_cens, what + ": a run of the pair has no window", nd
        )
    vci = _ratio_of_means(dur(hi).to_numpy(float), dur(lo).to_numpy(float), boot)
    return _row(name, vci, len(pair), 0, what, nd)


def _loglog_slope(x: np.ndarray, y: np.ndarray) -> float:
    if np.unique(x).size < 2:
        return NAN
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def sharing_beta(tau: pd.DataFrame, experiments: list[str], cfg: dict, boot: dict) -> dict:
    """The author's E11 statistic: beta, the slope of a least-squares line through
    (log sharing factor, log(mean duration + offset)), one point per sharing factor above
    `min_sharing_factor` (his: > 1, i.e. private selectors left out; offset 1). The duration
    is `dip_duration` (first L_cand < log K -> first L_cand < 0.5 nats); a censored run enters
    its condition's mean with its lower bound `dip_bound` (one that never dipped is left
    out), counted in n_censored. CI: percentile bootstrap resampling the runs within each
    condition."""
    name = "sharing_duration_beta"
    offset = float(cfg.get("offset", 1.0))
    min_factor = float(cfg.get("min_sharing_factor", 1.0))
    e = runs_of(tau, experiments)
    what = (f"slope of log(mean dip duration + {offset:g}) on log(sharing factor), factors > "
            f"{min_factor:g} ({_names(experiments)})")  # fmt: skip
    if e.empty:
        return _row(name, (NAN,) * 3, 0, 0, what)
    e = e[e.sharing_factor.astype(float) > min_factor]
    dur = e.dip_duration.astype("Float64").fillna(e.dip_bound.astype("Float64"))
    e = e.assign(y=dur.to_numpy(float)).dropna(subset=["y"])
    groups = [(float(x), g.y.to_numpy(float)) for x, g in e.groupby("sharing_factor")]
    n_cens = int(e.dip_censored.astype(bool).sum())
    if len(groups) < 2:
        return _row(name, (NAN,) * 3, len(e), n_cens, what + ": fewer than 2 sharing factors")
    xs = np.array([x for x, _ in groups])

    def slope(samples: list[np.ndarray]) -> float:
        return _loglog_slope(xs, np.array([v.mean() + offset for v in samples]))

    v = slope([g for _, g in groups])
    rng = np.random.default_rng(boot["seed"])
    reps = np.array(
        [slope([rng.choice(g, g.size) for _, g in groups]) for _ in range(boot["n_boot"])]
    )
    reps = reps[np.isfinite(reps)]
    lo = hi = NAN
    if reps.size and any(g.size > 1 for _, g in groups):
        a = (1 - boot["ci"]) / 2
        lo, hi = float(np.quantile(reps, a)), float(np.quantile(reps, 1 - a))
    return _row(name, (v, lo, hi), len(e), n_cens, what)


def batch_pair_ratios(
    tau: pd.DataFrame, experiments: list[str], cfg: dict, boot: dict
) -> list[dict]:
    """The author's batch statistic (his E7) over the runs of `experiments`: first-target
    tau at batch `batches[0]` over batch `batches[1]` at K = `k` (their smallest K when
    unset), in steps (his 1.8 = 128 over 256 at K = 20) and in examples seen (batch x tau)."""
    e, nd = kept_runs(tau, experiments)
    source = _names(experiments)
    names = ("batch_steps_ratio", "batch_examples_ratio_first")
    if e.empty or not cfg.get("batches"):
        return [_row(n, (NAN,) * 3, 0, 0, f"{source} first-target tau ratio", nd) for n in names]
    b0, b1 = cfg["batches"]
    k = cfg.get("k", e.k.min())
    e = e[e.k == k]
    out = []
    for name, per_example in zip(names, (False, True), strict=True):
        vals = {}
        for b in (b0, b1):
            g = e[e.batch_size == b]
            vals[b] = _tau_or_bound(g, "first_target_tau") * (b if per_example else 1.0)
        unit = "examples seen" if per_example else "steps"
        out.append(_row(name, _ratio_of_means(vals[b0], vals[b1], boot), len(e),
                        int(e.first_target_censored.sum()),
                        f"first-target tau in {unit}, batch {b0} / batch {b1} at K={k:g} ({source})", nd))  # fmt: skip
    return out


def extreme_ratio(tau, experiments, x, y, boot, name, what, invert=False) -> dict:
    """Mean y at the largest x over mean y at the smallest x (inverted: smallest / largest),
    over the runs of `experiments` (a diverged run is left out: not a bound on its tau)."""
    e, nd = kept_runs(tau, experiments)
    if e.empty or e[x].nunique() < 2:
        return _row(name, (NAN,) * 3, len(e), int(e.censored.sum()) if len(e) else 0, what, nd)
    vals = _tau_or_bound(e) * (e.batch_size.to_numpy(float) if y == "examples" else 1.0)
    e = e.assign(v=vals)
    lo_x, hi_x = e[x].min(), e[x].max()
    a = e.loc[e[x] == hi_x, "v"].to_numpy(float)
    b = e.loc[e[x] == lo_x, "v"].to_numpy(float)
    if invert:
        a, b = b, a
    return _row(name, _ratio_of_means(a, b, boot), len(e), int(e.censored.sum()), what, nd)


def routing_head_layer(ablation: pd.DataFrame) -> float:
    if ablation.empty:
        return NAN
    z = ablation[(ablation.phase == "mid") & (ablation.kind == "zero")]
    if z.empty:
        return NAN
    layers = z.loc[z.groupby("run_id").delta_delta_z.idxmin(), "layer"]
    return float(layers.mode().iloc[0])
