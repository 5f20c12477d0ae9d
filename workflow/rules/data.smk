rule dataset:
    output:
        L.dataset("{dataset_id}"),
    log:
        L.log("dataset", "{dataset_id}"),
    conda:
        "../../envs/mbc.yaml"
    params:
        task=lambda wc: DATASETS[wc.dataset_id].to_dict()["task"],
        seed=lambda wc: DATASETS[wc.dataset_id].seed,
    script:
        "../scripts/dataset.py"
