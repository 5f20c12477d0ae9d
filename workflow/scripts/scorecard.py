from mbc.workflow.rule_log import logged
from mbc.pipeline_report import make_scorecard

with logged(snakemake.log[0], snakemake.params):
    make_scorecard(snakemake.params.scorecard, snakemake.input[0], snakemake.output[0])
