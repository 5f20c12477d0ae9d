from mbc.runs_pipeline import concat_tables
from mbc.workflow.job_log import logged

with logged(snakemake.log[0], snakemake.params):
    concat_tables(list(snakemake.input), snakemake.output[0], snakemake.wildcards.table)
