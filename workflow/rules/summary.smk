rule summarize_run:
    input:
        metrics=L.metrics("{run_id}"),
    output:
        L.summary("{run_id}"),
    log:
        L.log("summary", "{run_id}"),
    # a finished run's chain before the next run trains: the run store takes a run
    # once its summary and diagnostics exist, so a period that ends stores what it trained
    priority: 1
    conda:
        "../../envs/mbc.yaml"
    params:
        spec=lambda wc: SPECS[wc.run_id].to_dict(),
        diagnostics=DIAG.summary,
        config_id=CONFIG_ID["summarize_run"],
    script:
        "../scripts/summarize_run.py"


rule tau_table:
    input:
        [L.summary(r) for r in all_run_ids()],
    output:
        L.table("tau"),
    log:
        L.log("tau_table"),
    conda:
        "../../envs/mbc.yaml"
    params:
        runs=[(r.experiment, r.spec.to_dict()) for r in CFG.runs],
    script:
        "../scripts/tau_table.py"


rule plateau_sensitivity:
    input:
        tau=L.table("tau"),
        metrics=L.table("metrics"),
    output:
        L.table("plateau_sensitivity"),
    log:
        L.log("plateau_sensitivity"),
    conda:
        "../../envs/mbc.yaml"
    params:
        cfg=CFG.plateau_sensitivity,
        diagnostics=DIAG.summary,
        config_id=CONFIG_ID["plateau_sensitivity"],
        grid={run_id: mbc.core.spec.grid_every(s.eval) for run_id, s in SPECS.items()},
    script:
        "../scripts/plateau_sensitivity.py"
