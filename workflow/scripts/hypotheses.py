from mbc.core.artifacts import built_from
from mbc.core.rule_log import logged
from mbc.pipeline import make_hypotheses

with logged(snakemake.log[0]), built_from(snakemake.input):
    make_hypotheses(snakemake.params.hypotheses, snakemake.input[0], snakemake.output[0])
