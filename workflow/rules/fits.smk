rule fits:
    input:
        tau=f"{OUT}/tau.csv",
        hessian=f"{OUT}/hessian.csv",
        metrics=f"{OUT}/metrics.csv",
    output:
        fits=f"{OUT}/fits.csv",
        threshold=f"{OUT}/threshold_sensitivity.csv",
    log:
        f"{OUT}/logs/fits.log",
    conda:
        "../../envs/mbc.yaml"
    params:
        raw={
            k: CFG.raw.get(k)
            for k in (
                "fits",
                "fit_differences",
                "bootstrap",
                "threshold_sensitivity",
                "diverged",
            )
        },
        grid={run_id: mbc.core.spec.grid_every(s.eval) for run_id, s in SPECS.items()},
    script:
        "../scripts/fits.py"
