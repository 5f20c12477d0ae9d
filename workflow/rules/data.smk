rule dataset:
    output:
        f"{OUT}/datasets/{{dataset_id}}.pt",
    log:
        f"{OUT}/logs/dataset/{{dataset_id}}.log",
    conda:
        "../../envs/mbc.yaml"
    params:
        task=lambda wc: DATASETS[wc.dataset_id].to_dict()["task"],
        seed=lambda wc: DATASETS[wc.dataset_id].seed,
    script:
        "../scripts/dataset.py"
