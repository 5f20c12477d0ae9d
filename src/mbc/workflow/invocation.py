"""Whether this `snakemake` invocation runs jobs: the start-up repairs the outdir only then.

The start-up repairs while the Snakefile is parsed, so that Snakemake plans its DAG from the
repaired files. At that point the workflow carries only the settings Snakemake builds before
parsing: `OutputSettings.dryrun` (`-n/--dry-run`, from the command line or a profile) and
`WorkflowSettings.exec_mode` (a job's own process: the Snakefile's MAIN_PROCESS). Which
command was asked for (`--lint`, `--summary`, `--list-changes`, `--unlock`, `--report`, ...)
Snakemake decides from its parsed command line after parsing the Snakefile, and hands the
workflow its DAG and execution settings only then. So the command line is read again here,
with Snakemake's own parser (profiles included, abbreviations as Snakemake reads them). Where
it cannot be read (Snakemake driven from Python, not its command line, or a parser that no
longer names a command checked here), the answer is None: nothing is repaired, and the
start-up says so; a wrong guess could change files under an inspection command.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

# the argparse names of the command-line options that make `snakemake` do something other
# than run the workflow's jobs (Snakemake's `args_to_api` dispatches on these); `-n` and
# `--touch` run the scheduler but no job
_NO_JOBS = (
    "dryrun",
    "touch",
    "lint",
    "list_target_rules",
    "list_rules",
    "print_compilation",
    "generate_unit_tests",
    "dag",
    "rulegraph",
    "filegraph",
    "d3dag",
    "unlock",
    "cleanup_metadata",
    "conda_cleanup_envs",
    "conda_create_envs_only",
    "list_conda_envs",
    "cleanup_shadow",
    "container_cleanup_images",
    "list_changes",
    "list_input_changes",
    "list_params_changes",
    "list_untracked",
    "summary",
    "detailed_summary",
    "archive",
    "delete_all_output",
    "delete_temp_output",
)


def _is_snakemake(argv0: str) -> bool:
    """The `snakemake` command, or `python -m snakemake`."""
    p = Path(argv0)
    return p.name == "snakemake" or (p.name == "__main__.py" and p.parent.name == "snakemake")


def command_line_runs_jobs(argv: list[str]) -> bool | None:
    """Whether Snakemake's command line `argv` runs the workflow's jobs; None where it is not
    Snakemake's command line or Snakemake's parser does not read it as this module expects."""
    if not argv or not _is_snakemake(argv[0]):
        return None
    try:
        from snakemake.cli import parse_args

        # Snakemake says "Using profile ..." once already
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            _, args = parse_args(argv[1:])
    except (Exception, SystemExit):
        return None
    if any(not hasattr(args, name) for name in (*_NO_JOBS, "containerize", "report")):
        return None
    if any(getattr(args, name) for name in _NO_JOBS) or args.containerize is not None:
        return False
    # --report alone writes the report from what exists; with --report-after-run it runs first
    return not (args.report and not getattr(args, "report_after_run", False))


def runs_jobs(workflow, argv: list[str] | None = None) -> bool | None:
    """Whether this invocation runs jobs (see the module's docstring): False under a dry run
    (Snakemake's `OutputSettings.dryrun`, whatever set it), else what its command line says."""
    if workflow.output_settings.dryrun:
        return False
    return command_line_runs_jobs(sys.argv if argv is None else argv)
