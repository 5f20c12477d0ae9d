rule summarize_run:
    input:
        metrics=run_path("{run_id}", "metrics.csv"),
    output:
        run_path("{run_id}", "summary.json"),
    log:
        f"{OUT}/logs/summary/{{run_id}}.log",
    conda:
        "../../envs/mbc.yaml"
    params:
        spec=lambda wc: SPECS[wc.run_id].to_dict(),
        diagnostics=CFG.raw["diagnostics"],
    script:
        "../scripts/summarize_run.py"


rule tau_table:
    input:
        [run_path(r, "summary.json") for r in all_run_ids()],
    output:
        f"{OUT}/tau.csv",
    log:
        f"{OUT}/logs/tau_table.log",
    conda:
        "../../envs/mbc.yaml"
    params:
        runs=[(r.experiment, r.spec.to_dict()) for r in CFG.runs],
    script:
        "../scripts/tau_table.py"


rule plateau_sensitivity:
    input:
        tau=f"{OUT}/tau.csv",
        metrics=f"{OUT}/metrics.csv",
    output:
        f"{OUT}/plateau_sensitivity.csv",
    log:
        f"{OUT}/logs/plateau_sensitivity.log",
    conda:
        "../../envs/mbc.yaml"
    params:
        cfg=CFG.raw["plateau_sensitivity"],
        diagnostics=CFG.raw["diagnostics"],
        grid={run_id: mbc.core.spec.grid_every(s.eval) for run_id, s in SPECS.items()},
    script:
        "../scripts/plateau_sensitivity.py"
