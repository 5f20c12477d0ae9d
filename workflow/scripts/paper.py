from mbc.report_pipeline import compile_paper
from mbc.workflow.job_log import logged

with logged(snakemake.log[0], snakemake.params):
    compile_paper(
        snakemake.input.tex,
        snakemake.params.texinputs,
        snakemake.output[0],
        [*snakemake.input.generated, *snakemake.input.figures],
    )
