from mbc.logging import logged
from mbc.pipeline import make_dataset
from mbc.spec import RunSpec

with logged(snakemake.log[0]):
    make_dataset(RunSpec.from_dict(snakemake.params.spec), snakemake.output[0])
