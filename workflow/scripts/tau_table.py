from mbc.core.config import Run
from mbc.workflow.rule_log import logged
from mbc.core.spec import RunSpec
from mbc.pipeline import make_tau_table

with logged(snakemake.log[0], snakemake.params):
    runs = [Run(e, RunSpec.from_dict(s)) for e, s in snakemake.params.runs]
    make_tau_table(runs, list(snakemake.input), snakemake.output[0])
