from pathlib import Path

from mbc.core.spec import RunSpec
from mbc.runs_pipeline import unpack_run
from mbc.workflow.job_log import logged

with logged(snakemake.log[0], snakemake.params):
    unpack_run(RunSpec.from_dict(snakemake.params.spec), Path(snakemake.output.metrics).parent)
