from mbc.report_pipeline import make_scorecard
from mbc.workflow.job_log import logged

with logged(snakemake.log[0], snakemake.params):
    make_scorecard(snakemake.params.scorecard, snakemake.input[0], snakemake.output[0])
