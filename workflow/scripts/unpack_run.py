from pathlib import Path

from mbc.workflow.rule_log import logged
from mbc.core.spec import RunSpec
from mbc.pipeline import unpack_run

with logged(snakemake.log[0], snakemake.params):
    unpack_run(RunSpec.from_dict(snakemake.params.spec), Path(snakemake.output.metrics).parent)
