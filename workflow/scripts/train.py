from pathlib import Path

from mbc.logging import logged
from mbc.pipeline import train
from mbc.spec import RunSpec

with logged(snakemake.log[0]):
    train(
        RunSpec.from_dict(snakemake.params.spec),
        snakemake.input[0],
        Path(snakemake.output.metrics).parent,
        device=snakemake.params.device,
        threads=snakemake.threads,
    )
