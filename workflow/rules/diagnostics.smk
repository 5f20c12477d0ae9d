# Post-hoc diagnostics on saved snapshots: they never retrain (inputs are checkpoint
# indices and summaries, not training jobs' state).


rule collective:
    input:
        unpack(run_inputs),
    output:
        groups=L.diagnostic("collective", "{run_id}"),
        summary=L.diagnostic("collective", "{run_id}", "_summary"),
    log:
        L.log("collective", "{run_id}"),
    # a finished run's chain before the next run trains: the run store takes a run
    # once its summary and diagnostics exist, so a period that ends stores what it trained
    priority: 1
    conda:
        "../../envs/mbc.yaml"
    params:
        spec=lambda wc: SPECS[wc.run_id].to_dict(),
        cfg=DIAG.collective,
        config_id=CONFIG_ID["collective"],
        device=config.get("device", "auto"),
    script:
        "../scripts/collective.py"


rule routing:
    input:
        unpack(run_inputs),
    output:
        attention=L.diagnostic("routing", "{run_id}", "_attention"),
        ablation=L.diagnostic("routing", "{run_id}", "_ablation"),
    log:
        L.log("routing", "{run_id}"),
    # a finished run's chain before the next run trains: the run store takes a run
    # once its summary and diagnostics exist, so a period that ends stores what it trained
    priority: 1
    conda:
        "../../envs/mbc.yaml"
    params:
        spec=lambda wc: SPECS[wc.run_id].to_dict(),
        cfg=DIAG.routing,
        config_id=CONFIG_ID["routing"],
        device=config.get("device", "auto"),
    script:
        "../scripts/routing.py"


rule hessian:
    input:
        unpack(run_inputs),
    output:
        L.diagnostic("hessian", "{run_id}"),
    log:
        L.log("hessian", "{run_id}"),
    # a finished run's chain before the next run trains: the run store takes a run
    # once its summary and diagnostics exist, so a period that ends stores what it trained
    priority: 1
    conda:
        "../../envs/mbc.yaml"
    params:
        spec=lambda wc: SPECS[wc.run_id].to_dict(),
        cfg=DIAG.hessian,
        config_id=CONFIG_ID["hessian"],
        device=config.get("device", "auto"),
    script:
        "../scripts/hessian.py"


rule aggregate:
    input:
        lambda wc: TABLES[wc.table],
    output:
        L.table("{table}"),
    log:
        L.log("aggregate", "{table}"),
    wildcard_constraints:
        table="|".join(TABLES),
    conda:
        "../../envs/mbc.yaml"
    script:
        "../scripts/aggregate.py"
