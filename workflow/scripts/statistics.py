from mbc.report_pipeline import make_statistics
from mbc.workflow.job_log import logged

with logged(snakemake.log[0], snakemake.params):
    make_statistics(
        snakemake.params.statistics,
        snakemake.params.bootstrap,
        snakemake.params.diverged,
        dict(snakemake.input.items()),
        snakemake.output[0],
    )
