from mbc.workflow.rule_log import logged
from mbc.pipeline import concat_tables

with logged(snakemake.log[0], snakemake.params):
    concat_tables(list(snakemake.input), snakemake.output[0], snakemake.wildcards.table)
