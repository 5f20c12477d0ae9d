from mbc.config import Run
from mbc.logging import logged
from mbc.pipeline import make_tau_table
from mbc.spec import RunSpec

with logged(snakemake.log[0]):
    runs = [Run(e, RunSpec.from_dict(s)) for e, s in snakemake.params.runs]
    make_tau_table(runs, list(snakemake.input), snakemake.output[0])
