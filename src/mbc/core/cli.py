"""How the package's command-line tools end.

`python -m mbc.status ... | head` closes the pipe while the table is still printing; Python
would then print a BrokenPipeError traceback for a command that did what it was asked. `run`
ends such a command quietly, with the shell's status for a closed pipe (141)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

CLOSED_PIPE_STATUS = 128 + 13  # killed by SIGPIPE, as a C tool in a pipe would be


def run(main: Callable[[], object]) -> None:
    """Call a tool's `main()` and exit with its return value (None: 0)."""
    try:
        status = main()
        sys.stdout.flush()  # a closed pipe is found here when the output fit in the buffer
    except BrokenPipeError:
        # whatever is still buffered would raise again at exit: send it nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(CLOSED_PIPE_STATUS)
    sys.exit(status if isinstance(status, int) else 0)


# argparse types: a bad value is argparse's one line (`error: argument --x: ...`), exit 2


def positive_float(text: str) -> float:
    """A number above 0 (a rate, a duration)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number above 0")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least 1")
    return value


def json_file(text: str) -> str:
    """A file that holds JSON (read here, so that a bad one is named before any work)."""
    try:
        json.loads(Path(text).read_text(encoding="utf-8"))
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text}: cannot read ({exc.strerror})") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise argparse.ArgumentTypeError(f"{text}: not valid JSON ({exc})") from None
    return text


def figure_file(text: str) -> str:
    """A path matplotlib can write a figure to: .png or .pdf."""
    if not text.lower().endswith((".png", ".pdf")):
        raise argparse.ArgumentTypeError(f"{text}: must end in .png or .pdf")
    return text
