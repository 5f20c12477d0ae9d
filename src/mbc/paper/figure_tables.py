"""Which tables each paper figure reads, in the paper's order (Snakemake's and the
report's): all the workflow needs to know of the figures, their names and inputs, without
importing matplotlib at every job's start-up. `mbc.paper.figures` registers one drawing
function per entry and refuses one that reads other tables."""

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
    "appendix_sharing": ["tau", "fits"],
    "init_scale": ["tau", "fits"],
    "appendix_threshold": ["threshold_sensitivity"],
    "appendix_plateau": ["plateau_sensitivity"],
}
