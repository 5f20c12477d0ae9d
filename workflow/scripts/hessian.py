from pathlib import Path

from mbc.workflow.rule_log import logged
from mbc.core.spec import RunSpec
from mbc.pipeline import diagnose_hessian

with logged(snakemake.log[0], snakemake.params):
    diagnose_hessian(
        RunSpec.from_dict(snakemake.params.spec),
        snakemake.input.dataset,
        Path(snakemake.input.checkpoints).parent,
        snakemake.input.summary,
        snakemake.params.cfg,
        snakemake.output[0],
        device=snakemake.params.device,
    )
