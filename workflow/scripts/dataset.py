from mbc.logging import logged
from mbc.pipeline import make_dataset
from mbc.spec import TaskSpec

with logged(snakemake.log[0]):
    make_dataset(TaskSpec(**snakemake.params.task), snakemake.params.seed, snakemake.output[0])
