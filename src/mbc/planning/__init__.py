"""Planning a run of the pipeline: what it will cost (`cost`)."""
