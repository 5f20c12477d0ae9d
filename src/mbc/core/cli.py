"""How the package's command-line tools end.

`python -m mbc.status ... | head` closes the pipe while the table is still printing; Python
would then print a BrokenPipeError traceback for a command that did what it was asked. `run`
ends such a command quietly, with the shell's status for a closed pipe (141)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

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
