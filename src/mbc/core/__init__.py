"""Run specifications, the config and its validation, file I/O, rule logs, integrity checks."""
