"""The paper's PDF: latexmk in a scratch directory, its log kept beside the PDF (where the
tests look for overfull boxes and missing characters), the PDF moved into place atomically."""

from __future__ import annotations

import os
from pathlib import Path

from mbc.core.artifacts import write_bytes_atomic, write_text_atomic


def run_latexmk(tex_path, texinputs: list, out_pdf) -> None:
    """latexmk in a scratch directory, then move the PDF into place atomically."""
    import shutil
    import subprocess
    import tempfile

    if not shutil.which("latexmk"):
        raise RuntimeError("latexmk not found: install the TeX toolchain (paper/README_TEX.md)")
    env = dict(os.environ, TEXINPUTS=":".join(str(Path(p).resolve()) for p in texinputs) + ":")
    try:
        scratch = tempfile.TemporaryDirectory(prefix="mbc-latex-")
    except OSError:  # no writable temporary directory: beside the PDF, removed all the same
        Path(out_pdf).parent.mkdir(parents=True, exist_ok=True)
        scratch = tempfile.TemporaryDirectory(prefix=".mbc-latex-", dir=Path(out_pdf).parent)
    with scratch as tmp:
        cmd = [
            "latexmk",
            "-pdf",
            "-interaction=nonstopmode",
            "-halt-on-error",
            f"-output-directory={tmp}",
            str(Path(tex_path).resolve()),
        ]
        # TeX's messages are bytes in whatever encoding the paths and fonts gave them
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace")
        print(res.stdout)  # latexmk's transcript: the rule's log, not the console
        if res.returncode != 0:
            raise RuntimeError(
                f"latexmk failed ({res.returncode}):\n{res.stdout[-3000:]}{res.stderr[-2000:]}"
            )
        log = (Path(tmp) / "main.log").read_text(errors="replace")
        if "Undefined control sequence" in log:
            raise RuntimeError("main.tex uses a macro that numbers.tex does not define")
        # kept beside the PDF: overfull boxes and missing characters are checked there
        write_text_atomic(Path(out_pdf).with_suffix(".log"), log)
        write_bytes_atomic(out_pdf, (Path(tmp) / "main.pdf").read_bytes())
