from mbc.core.config_loader import Run
from mbc.core.spec import RunSpec
from mbc.runs_pipeline import make_tau_table
from mbc.workflow.job_log import logged

with logged(snakemake.log[0], snakemake.params):
    runs = [Run(e, RunSpec.from_dict(s)) for e, s in snakemake.params.runs]
    make_tau_table(runs, list(snakemake.input), snakemake.output[0])
