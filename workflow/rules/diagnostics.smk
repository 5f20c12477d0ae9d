# Post-hoc diagnostics on saved snapshots: they never retrain (inputs are checkpoint
# indices and summaries, not training jobs' state).


rule collective:
    input:
        unpack(run_inputs),
    output:
        groups=diag_path("collective", "{run_id}"),
        summary=diag_path("collective", "{run_id}", "_summary"),
    log:
        f"{OUT}/logs/collective/{{run_id}}.log",
    conda:
        "../../envs/mbc.yaml"
    params:
        spec=lambda wc: SPECS[wc.run_id].to_dict(),
        cfg=DIAG["collective"],
        device=config.get("device", "auto"),
    script:
        "../scripts/collective.py"


rule routing:
    input:
        unpack(run_inputs),
    output:
        attention=diag_path("routing", "{run_id}", "_attention"),
        ablation=diag_path("routing", "{run_id}", "_ablation"),
    log:
        f"{OUT}/logs/routing/{{run_id}}.log",
    conda:
        "../../envs/mbc.yaml"
    params:
        spec=lambda wc: SPECS[wc.run_id].to_dict(),
        cfg=DIAG["routing"],
        device=config.get("device", "auto"),
    script:
        "../scripts/routing.py"


rule hessian:
    input:
        unpack(run_inputs),
    output:
        diag_path("hessian", "{run_id}"),
    log:
        f"{OUT}/logs/hessian/{{run_id}}.log",
    conda:
        "../../envs/mbc.yaml"
    params:
        spec=lambda wc: SPECS[wc.run_id].to_dict(),
        cfg=DIAG["hessian"],
        device=config.get("device", "auto"),
    script:
        "../scripts/hessian.py"


rule aggregate:
    input:
        lambda wc: TABLES[wc.table],
    output:
        f"{OUT}/{{table}}.csv",
    log:
        f"{OUT}/logs/aggregate/{{table}}.log",
    wildcard_constraints:
        table="|".join(TABLES),
    conda:
        "../../envs/mbc.yaml"
    script:
        "../scripts/aggregate.py"
