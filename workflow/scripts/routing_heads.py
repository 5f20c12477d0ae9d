from mbc.runs_pipeline import make_routing_heads
from mbc.workflow.job_log import logged

with logged(snakemake.log[0], snakemake.params):
    make_routing_heads(snakemake.input.attention, snakemake.input.ablation, snakemake.output[0])
