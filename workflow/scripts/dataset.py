from mbc.core.spec import TaskSpec
from mbc.runs_pipeline import make_dataset
from mbc.workflow.job_log import logged

with logged(snakemake.log[0], snakemake.params):
    make_dataset(TaskSpec(**snakemake.params.task), snakemake.params.seed, snakemake.output[0])
