from mbc.workflow.rule_log import logged
from mbc.pipeline_report import compile_paper

with logged(snakemake.log[0], snakemake.params):
    compile_paper(
        snakemake.input.tex,
        snakemake.params.texinputs,
        snakemake.output[0],
        [*snakemake.input.generated, *snakemake.input.figures],
    )
