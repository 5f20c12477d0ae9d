from mbc.core.rule_log import logged
from mbc.pipeline_report import compile_paper

with logged(snakemake.log[0]):
    compile_paper(snakemake.input.tex, snakemake.params.texinputs, snakemake.output[0])
