"""Training (data.smk, train.smk): the task data, the model, in-loop metrics, the training loop."""
