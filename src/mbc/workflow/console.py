"""What Snakemake itself says on the console during a run.

A run of 85 jobs printed some 900 lines: a block per job, a progress counter, a pair of
scheduling lines per round and a host header. The console keeps Snakemake's errors,
warnings and one-off lines ("Building DAG of jobs...", "Nothing to be done", its log's
path); the rest goes to its log file only (`.snakemake/log/`), which every handler but the
console's still receives. With the banner, one line per trained run and the report's path
(job_log.console, report.smk), that is what a person watching reads.
"""

from __future__ import annotations

import logging

# Snakemake's log events (snakemake_interface_logger_plugins.common.LogEvent) kept off
# the console; JOB_ERROR, GROUP_ERROR and ERROR are not among them.
QUIET_EVENTS = frozenset(
    {
        "job_info",
        "job_started",
        "job_finished",
        "group_info",
        "progress",
        "resources_info",
        "run_info",
        "workflow_started",
    }
)
# one-off lines without an event that repeat every scheduling round or say nothing to a user
QUIET_MESSAGES = ("Select jobs to execute...", "Using shell:", "Assuming unrestricted shared")


class QuietConsole(logging.Filter):
    """Drops the records above, whatever their level below a warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        event = getattr(record, "event", None)
        if event is not None and str(event) in QUIET_EVENTS:
            return False
        return not str(record.msg or "").startswith(QUIET_MESSAGES)


def quiet_console(logger: logging.Logger) -> int:
    """Add `QuietConsole` to `logger`'s console handler (Snakemake's stream handler, not
    its log file's); the number of handlers it was added to."""
    added = 0
    for h in logger.handlers:
        if type(h) is not logging.FileHandler and isinstance(h, logging.StreamHandler):
            if not any(isinstance(f, QuietConsole) for f in h.filters):
                h.addFilter(QuietConsole())
            added += 1
    return added
