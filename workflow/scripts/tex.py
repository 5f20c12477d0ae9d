from mbc.report_pipeline import make_tex
from mbc.workflow.job_log import logged

with logged(snakemake.log[0], snakemake.params):
    make_tex(
        snakemake.params.preset,
        dict(snakemake.input.items()),
        dict(snakemake.output.items()),
        snakemake.params.report,
        snakemake.params.questions,  # each experiment's question: the table of experiments
    )
