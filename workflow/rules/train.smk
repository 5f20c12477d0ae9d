# Training: the only rule that wants a GPU. Resumable: its own checkpoints live in
# runs/<id>/state/, outside Snakemake's outputs, so a retried job continues.


rule train:
    input:
        lambda wc: f"{OUT}/datasets/{SPECS[wc.run_id].dataset_id}.pt",
    output:
        metrics=f"{OUT}/runs/{{run_id}}/metrics.csv",
        checkpoints=f"{OUT}/runs/{{run_id}}/checkpoints.csv",
    log:
        f"{OUT}/logs/train/{{run_id}}.log",
    conda:
        "../../envs/mbc.yaml"
    threads: config.get("threads", 1)
    resources:
        # Local runs: `--resources train_slots=N` bounds concurrent training jobs per GPU.
        train_slots=1,
    params:
        spec=lambda wc: SPECS[wc.run_id].to_dict(),
        device=config.get("device", "auto"),
    script:
        "../scripts/train.py"
