from mbc.workflow.rule_log import logged
from mbc.pipeline_report import make_robustness

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
