from mbc.workflow.rule_log import logged
from mbc.pipeline_report import make_hypotheses

with logged(snakemake.log[0], snakemake.params):
    make_hypotheses(snakemake.params.hypotheses, snakemake.input[0], snakemake.output[0])
