from mbc.report_pipeline import make_hypotheses
from mbc.workflow.job_log import logged

with logged(snakemake.log[0], snakemake.params):
    make_hypotheses(snakemake.params.hypotheses, snakemake.input[0], snakemake.output[0])
