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
            )
        },
    script:
        "../scripts/fits.py"
