# Training: the only rules that want a GPU. Resumable: a run's own checkpoints live in
# runs/<id>/state/, outside Snakemake's outputs, so a retried job continues.
#
# pack.enabled: the runs of one shape train together in one `train_pack` job (PACKS in
# common.smk); each packed run's tables are then written by `unpack_run` from the log its
# pack wrote, exactly where `train` writes them. The linear baseline's runs (E13) pack
# among themselves (`mbc.training.packed_models.PackedLinear`).
rule train:
    input:
        lambda wc: L.dataset(SPECS[wc.run_id].dataset_id),
    output:
        metrics=L.metrics("{run_id}"),
        checkpoints=L.checkpoints("{run_id}"),
    log:
        L.log("train", "{run_id}"),
    wildcard_constraints:
        run_id=one_of(r for r in SPECS if r not in PACK_OF) if PACKS else "[^/]+",
    # under a deadline, the shortest run first (0, -1, -2, ...): below a finished run's
    # summary and diagnostics (priority 1)
    priority: lambda wc: TRAIN_PRIORITY.get(wc.run_id, 0)
    conda:
        "../../envs/mbc.yaml"
    threads: config.get("threads", 1)
    resources:
        # Local runs: `--resources train_slots=N` bounds concurrent training jobs per GPU,
        # `--resources gpu_mem_mb=M` their estimated memory (docs/gpu-and-slurm.md).
        train_slots=1,
        gpu_mem_mb=lambda wc: gpu_mem_mb([wc.run_id]),
    params:
        spec=lambda wc: SPECS[wc.run_id].to_dict(),
        device=config.get("device", "auto"),
    script:
        "../scripts/train.py"


if PACKS:

    rule train_pack:
        input:
            lambda wc: [L.dataset(SPECS[r].dataset_id) for r in PACKS[wc.pack_id]],
        output:
            L.pack("{pack_id}"),
        log:
            L.log("train_pack", "{pack_id}"),
        wildcard_constraints:
            pack_id=one_of(PACKS),
        # the pack with the most work first, the small ones beside it (packing.pack_priority)
        priority: lambda wc: mbc.core.packing.pack_priority([SPECS[r] for r in PACKS[wc.pack_id]])
        conda:
            "../../envs/mbc.yaml"
        threads: config.get("threads", 1)
        resources:
            train_slots=1,
            gpu_mem_mb=lambda wc: gpu_mem_mb(PACKS[wc.pack_id]),
        params:
            specs=lambda wc: [SPECS[r].to_dict() for r in PACKS[wc.pack_id]],
            device=config.get("device", "auto"),
        script:
            "../scripts/train_pack.py"

    rule unpack_run:
        input:
            # ancient: a pack that runs again (a run added to it) leaves the tables of
            # its finished runs, and all that is read from them, up to date. (A deleted
            # manifest, when one of its runs must be retrained, reruns all of them.)
            lambda wc: ancient(L.pack(PACK_OF[wc.run_id])),
        output:
            metrics=L.metrics("{run_id}"),
            checkpoints=L.checkpoints("{run_id}"),
        log:
            L.log("unpack_run", "{run_id}"),
        wildcard_constraints:
            run_id=one_of(PACK_OF),
        localrule: True  # reads a log, writes two tables
        conda:
            "../../envs/mbc.yaml"
        params:
            spec=lambda wc: SPECS[wc.run_id].to_dict(),
        script:
            "../scripts/unpack_run.py"
