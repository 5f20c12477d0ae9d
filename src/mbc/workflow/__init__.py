"""What faces Snakemake: the start-up's repair of an outdir (`integrity`) under its hold
(`outdir_hold`), what the invocation asks for (`invocation`), the console (`console`) and a
rule job's log (`job_log`). The domain below it (`mbc.core`) knows nothing of Snakemake."""
