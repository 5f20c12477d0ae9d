rule dataset:
    output:
        f"{OUT}/datasets/{{dataset_id}}.pt",
    params:
        spec=lambda wc: DATASETS[wc.dataset_id].to_dict(),
    log:
        f"{OUT}/logs/dataset/{{dataset_id}}.log",
    script:
        "../scripts/dataset.py"
