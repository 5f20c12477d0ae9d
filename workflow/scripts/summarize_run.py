from mbc.workflow.rule_log import logged
from mbc.core.spec import RunSpec
from mbc.pipeline import summarize

with logged(snakemake.log[0], snakemake.params):
    summarize(
        RunSpec.from_dict(snakemake.params.spec),
        snakemake.input.metrics,
        snakemake.output[0],
        snakemake.params.diagnostics,
    )
