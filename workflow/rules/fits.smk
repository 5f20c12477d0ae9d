rule fits:
    input:
        tau=L.table("tau"),
        hessian=L.table("hessian"),
        metrics=L.table("metrics"),
        # E4's runs: the author's sampled evaluation is in the train_log.csv beside each
        run_metrics=sorted(
            {
                L.metrics(r)
                for e in CFG.fits.threshold_sensitivity.experiments
                for r in CFG.run_ids(e)
            }
        ),
    output:
        fits=L.table("fits"),
        threshold=L.table("threshold_sensitivity"),
    log:
        L.log("fits"),
    conda:
        "../../envs/mbc.yaml"
    params:
        fits=CFG.fits,
        bootstrap=CFG.bootstrap,
        diverged=CFG.diverged,
        config_id=CONFIG_ID["fits"],
        grid={run_id: mbc.core.spec.grid_every(s.eval) for run_id, s in SPECS.items()},
    script:
        "../scripts/fits.py"
