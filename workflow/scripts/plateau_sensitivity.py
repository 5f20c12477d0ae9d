from mbc.runs_pipeline import make_plateau_sensitivity
from mbc.workflow.job_log import logged

with logged(snakemake.log[0], snakemake.params):
    make_plateau_sensitivity(
        snakemake.params.cfg,
        snakemake.params.diagnostics,
        snakemake.input.tau,
        snakemake.input.metrics,
        snakemake.output[0],
        grid=snakemake.params.grid,
    )
