from mbc.paper.figures import render
from mbc.workflow.job_log import logged

with logged(snakemake.log[0], snakemake.params):
    render(
        snakemake.wildcards.figure,
        dict(snakemake.input.items()),
        snakemake.output.pdf,
        snakemake.output.png,
        snakemake.params.entry,  # its config `figures` entry: the experiments and fits it draws
        snakemake.output.caption,  # its caption, for what it drew (the report inputs it)
    )
