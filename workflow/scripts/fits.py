from mbc.report_pipeline import make_fits
from mbc.workflow.job_log import logged

with logged(snakemake.log[0], snakemake.params):
    make_fits(
        snakemake.params.fits,
        snakemake.params.bootstrap,
        snakemake.params.diverged,
        snakemake.input.tau,
        snakemake.input.hessian,
        snakemake.input.metrics,
        snakemake.output.fits,
        snakemake.output.threshold,
        grid=snakemake.params.grid,
        run_metrics=snakemake.input.run_metrics,
    )
