from mbc.report_pipeline import make_robustness
from mbc.workflow.job_log import logged

with logged(snakemake.log[0], snakemake.params):
    make_robustness(
        snakemake.params.robustness,
        snakemake.params.claims,
        snakemake.params.bootstrap,
        snakemake.params.diverged,
        snakemake.input.tau,
        snakemake.input.statistics,
        dict(snakemake.output.items()),
    )
