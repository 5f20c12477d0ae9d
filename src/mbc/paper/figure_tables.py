"""Which tables each paper figure reads, in the paper's order (Snakemake's and the
report's), and the roles of its entry in config `figures`: all the workflow needs to know
of the figures, without importing matplotlib at every job's start-up. `mbc.paper.figures`
registers one drawing function per entry and refuses one that reads other tables."""

from mbc.core.config_references import ConfigError, dotted
from mbc.diagnostics.config_sections import hessian_methods

FIGURE_TABLES: dict[str, list[str]] = {
    "loss_curves": ["metrics", "tau"],
    "tau_vs_d": ["tau", "fits"],
    "noise": ["tau", "fits"],
    "collective": ["collective", "collective_summary"],
    "routing": ["routing_attention", "routing_ablation", "tau"],
    "hessian": ["hessian", "fits"],
    "appendix_linear": ["metrics", "tau"],
    "appendix_direction": ["tau"],
    "appendix_label_noise": ["tau"],
    "appendix_sharing": ["tau", "fits", "statistics"],
    "init_scale": ["tau", "fits"],
    "appendix_threshold": ["threshold_sensitivity"],
    "appendix_plateau": ["plateau_sensitivity"],
}

# A figure's entry in config `figures`: `experiments` maps each role below to the experiments
# it draws in that role, `fits` each role to the `fits` entry whose line it draws there (a
# `by` fit: one line per value). The schema requires every role (mbc.config.schema).
# A figure without roles draws tables whose runs other sections choose (`diagnostics`,
# `threshold_sensitivity`, `plateau_sensitivity`).
FIGURE_ROLES: dict[str, dict[str, tuple[str, ...]]] = {
    "loss_curves": {"experiments": ("runs",)},
    # main panel: both roles against D, our tau (`line`) and the author's on his sampled
    # evaluation (`author_line`, the scorecard's); inset: our tau vs K at each D of `d_fixed`
    # (a `by: d` fit)
    "tau_vs_d": {
        "experiments": ("n_groups_fixed", "d_fixed"),
        "fits": ("line", "author_line", "inset"),
    },
    # top, the author's statistics the rows and H2 read: (a) the sampled window vs lr,
    # (b, c) first-target tau vs batch in steps and in examples; bottom (d-f), ours: the
    # candidate tau against the same (`by: k` fits for the batch panels)
    "noise": {
        "experiments": ("lr", "batch_size"),
        "fits": (
            "author_lr",
            "author_batch_steps",
            "author_batch_examples",
            "lr",
            "batch_steps",
            "batch_examples",
        ),
    },
    "collective": {},
    "routing": {"experiments": ("onsets",)},
    # one anisotropy-vs-K fit per estimator: its roles are open (`OPEN_ROLES`)
    "hessian": {"fits": ()},
    # the linear runs, and the transformer runs preferred as their match (same K and D)
    "appendix_linear": {"experiments": ("linear", "identity", "transformer")},
    # (a) ours: candidate tau of `runs`; (b) the author's lag of `author` (his regime)
    "appendix_direction": {"experiments": ("runs", "author")},
    "appendix_label_noise": {"experiments": ("runs",)},
    # (a) the author's E11 duration on his sampled evaluation, with H1's beta (`author`);
    # (b) our candidate tau with the `line` fit
    "appendix_sharing": {"experiments": ("runs",), "fits": ("line",), "statistics": ("author",)},
    # (a) tau vs init std; (b) tau vs D under the default and the alternative init
    "init_scale": {
        "experiments": ("sweep", "default_init", "alternative_init"),
        "fits": ("sweep", "default_init", "alternative_init"),
    },
    "appendix_threshold": {},
    "appendix_plateau": {},
}

# Roles a figure takes from elsewhere in config: the hessian figure's fit roles are the
# estimators of config `diagnostics.hessian.methods`, each optional (an estimator without
# one is drawn without a line); the fit in role m reads m's rows (`method: m`).
OPEN_ROLES = {("hessian", "fits")}

# The fit roles that draw one line per value of a `by` fit, and the `by` they need (the
# figure reads the fit's rows `<name>_at_<by><value>`; `check_fit_roles` checks it).
FIT_ROLES_BY: dict[tuple[str, str], str] = {
    ("tau_vs_d", "inset"): "d",
    ("noise", "batch_steps"): "k",
    ("noise", "batch_examples"): "k",
    ("noise", "author_batch_steps"): "k",
    ("noise", "author_batch_examples"): "k",
}


def figures_schema() -> dict:
    """The JSON schema of config `figures`: an entry per figure that has roles, with exactly
    its roles (the definitions `figure_experiments`, `figure_fits` and `figure_statistics` say
    what a role holds);
    a figure without roles may be left out. `mbc.config.schema` reads it."""

    def closed(props: dict) -> dict:  # exactly these keys
        return {
            "type": "object",
            "additionalProperties": False,
            "required": list(props),
            "properties": props,
        }

    def role_map(name: str, kind: str, names: tuple[str, ...]) -> dict:
        role = {"$ref": f"#/definitions/figure_{kind}"}
        if (name, kind) in OPEN_ROLES:  # its keys are checked by `check_fit_roles`
            return {"type": "object", "additionalProperties": role}
        return closed({r: role for r in names})

    entries = {
        name: closed({kind: role_map(name, kind, names) for kind, names in roles.items()})
        for name, roles in FIGURE_ROLES.items()
    }
    return {**closed(entries), "required": [n for n, roles in FIGURE_ROLES.items() if roles]}


def check_fit_roles(cfg: dict, written=dotted) -> None:
    """Each fit a figure's role draws has a `by` where the role draws one line per value and
    none elsewhere, and the hessian figure's roles are estimators whose rows their fits read (`mbc.config.load` runs it after core's checks, which know the fits
    exist). An error names the key where the user wrote it (`written`)."""
    fit_by = {f["name"]: f.get("by") for f in cfg.get("fits", [])}
    fit_method = {f["name"]: f.get("method") for f in cfg.get("fits", [])}
    methods = hessian_methods(cfg)
    for fig, entry in (cfg.get("figures") or {}).items():
        for role, fit in (entry.get("fits") or {}).items():
            if (fig, "fits") in OPEN_ROLES:
                key = written(("figures", fig, "fits", role))
                if role not in methods:
                    raise ConfigError(key, fit, f"not in diagnostics.hessian.methods {methods}")
                if fit_method.get(fit) != role:
                    raise ConfigError(key, fit, f"this role draws a fit with `method: {role}`")
            need, has = FIT_ROLES_BY.get((fig, role)), fit_by.get(fit)
            if need != has:  # the figure reads <name>_at_<by><value> rows, or one line
                why = (
                    f"this role draws a fit with `by: {need}`"
                    if need
                    else "this role draws one line: a fit without `by`"
                )
                key = written(("figures", fig, "fits", role))
                raise ConfigError(key, fit, why + (f" (it has `by: {has}`)" if has else ""))
