from mbc.workflow.rule_log import logged
from mbc.pipeline_report import make_tex

with logged(snakemake.log[0], snakemake.params):
    make_tex(
        snakemake.params.preset,
        dict(snakemake.input.items()),
        dict(snakemake.output.items()),
        snakemake.params.report,
        snakemake.params.questions,  # each experiment's question: the table of experiments
    )
