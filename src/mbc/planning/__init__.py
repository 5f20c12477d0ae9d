"""Planning a run of the pipeline: what it will cost (`cost`, pure), how fast this machine
steps (`timing`), and what an invocation says before any job (`banner`)."""
