from pathlib import Path

from mbc.workflow.rule_log import logged
from mbc.core.spec import RunSpec
from mbc.pipeline import diagnose_collective

with logged(snakemake.log[0], snakemake.params):
    diagnose_collective(
        RunSpec.from_dict(snakemake.params.spec),
        snakemake.input.dataset,
        Path(snakemake.input.checkpoints).parent,
        snakemake.input.summary,
        snakemake.params.cfg,
        snakemake.output.groups,
        snakemake.output.summary,
        device=snakemake.params.device,
    )
