"""Planning and watching a run of the pipeline: what it will cost (`cost`, pure), how fast
this machine steps (`timing`), what an invocation says before any job (`banner`), and the
live loss curves of its runs (`curves`, drawn by `mbc.status --plot`)."""
