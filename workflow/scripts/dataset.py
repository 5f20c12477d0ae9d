from mbc.workflow.rule_log import logged
from mbc.core.spec import TaskSpec
from mbc.pipeline import make_dataset

with logged(snakemake.log[0], snakemake.params):
    make_dataset(TaskSpec(**snakemake.params.task), snakemake.params.seed, snakemake.output[0])
