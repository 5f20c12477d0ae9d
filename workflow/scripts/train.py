from pathlib import Path

from mbc.workflow.rule_log import logged
from mbc.core.spec import RunSpec
from mbc.pipeline import train

with logged(snakemake.log[0], snakemake.params):
    train(
        RunSpec.from_dict(snakemake.params.spec),
        snakemake.input[0],
        Path(snakemake.output.metrics).parent,
        device=snakemake.params.device,
        threads=snakemake.threads,
    )
