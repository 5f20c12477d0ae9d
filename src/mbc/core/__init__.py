"""The domain every layer shares: the run spec, core's config and its validation, where every
file lies (layout), how files are written and read (artifacts), a run's journal and lock."""
