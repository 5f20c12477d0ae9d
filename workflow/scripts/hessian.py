from pathlib import Path

from mbc.core.spec import RunSpec
from mbc.runs_pipeline import diagnose_hessian
from mbc.workflow.job_log import logged

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
