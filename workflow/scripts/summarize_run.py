from mbc.logging import logged
from mbc.pipeline import summarize
from mbc.spec import RunSpec

with logged(snakemake.log[0]):
    summarize(
        RunSpec.from_dict(snakemake.params.spec),
        snakemake.input.metrics,
        snakemake.output[0],
        snakemake.params.diagnostics,
    )
