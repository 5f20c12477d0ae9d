from pathlib import Path

from mbc.core.spec import RunSpec
from mbc.runs_pipeline import train
from mbc.workflow.job_log import logged

with logged(snakemake.log[0], snakemake.params):
    train(
        RunSpec.from_dict(snakemake.params.spec),
        snakemake.input[0],
        Path(snakemake.output.metrics).parent,
        device=snakemake.params.device,
        threads=snakemake.threads,
    )
