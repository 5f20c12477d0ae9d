from mbc.workflow.rule_log import logged
from mbc.pipeline_report import make_statistics

with logged(snakemake.log[0], snakemake.params):
    make_statistics(
        snakemake.params.statistics,
        snakemake.params.bootstrap,
        snakemake.params.diverged,
        dict(snakemake.input.items()),
        snakemake.output[0],
    )
