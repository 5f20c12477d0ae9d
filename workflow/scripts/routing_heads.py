from mbc.workflow.rule_log import logged
from mbc.pipeline import make_routing_heads

with logged(snakemake.log[0], snakemake.params):
    make_routing_heads(snakemake.input.attention, snakemake.input.ablation, snakemake.output[0])
