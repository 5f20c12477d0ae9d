from mbc.core.spec import RunSpec
from mbc.runs_pipeline import summarize
from mbc.workflow.job_log import logged

with logged(snakemake.log[0], snakemake.params):
    summarize(
        RunSpec.from_dict(snakemake.params.spec),
        snakemake.input.metrics,
        snakemake.output[0],
        snakemake.params.diagnostics,
    )
