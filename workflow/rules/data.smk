rule dataset:
    output:
        f"{OUT}/datasets/{{dataset_id}}.pt",
    log:
        f"{OUT}/logs/dataset/{{dataset_id}}.log",
    conda:
        "../../envs/mbc.yaml"
    params:
        spec=lambda wc: DATASETS[wc.dataset_id].to_dict(),
    script:
        "../scripts/dataset.py"
