# mbc: Marginals Before Conditionals, end to end. Rules live in workflow/rules/.
# Usage: snakemake --cores 8 all [--config preset=smoke|quick]; see README.md.


configfile: "config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/summary.smk"
include: "workflow/rules/diagnostics.smk"
include: "workflow/rules/fits.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/startup.smk"


rule all:
    default_target: True
    input:
        ALL_TARGETS,
