from mbc.core.layout import Layout
from mbc.core.spec import RunSpec
from mbc.runs_pipeline import train_pack
from mbc.workflow.job_log import logged

with logged(snakemake.log[0], snakemake.params):
    specs = [RunSpec.from_dict(d) for d in snakemake.params.specs]
    layout = Layout.of_pack(snakemake.output[0])
    train_pack(
        specs,
        list(snakemake.input),
        [layout.run_dir(s.run_id) for s in specs],
        snakemake.output[0],
        device=snakemake.params.device,
        threads=snakemake.threads,
    )
