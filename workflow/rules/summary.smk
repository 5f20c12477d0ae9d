rule summarize_run:
    input:
        metrics=run_path("{run_id}", "metrics.csv"),
    output:
        run_path("{run_id}", "summary.json"),
    params:
        spec=lambda wc: SPECS[wc.run_id].to_dict(),
        diagnostics=CFG.raw["diagnostics"],
    log:
        f"{OUT}/logs/summary/{{run_id}}.log",
    script:
        "../scripts/summarize_run.py"


rule tau_table:
    input:
        [run_path(r, "summary.json") for r in all_run_ids()],
    output:
        f"{OUT}/tau.csv",
    params:
        runs=[(r.experiment, r.spec.to_dict()) for r in CFG.runs],
    log:
        f"{OUT}/logs/tau_table.log",
    script:
        "../scripts/tau_table.py"
