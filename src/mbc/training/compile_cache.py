"""Where `torch.compile` keeps its kernels: one Inductor cache per outdir, so a job of a
shape compiled before loads the kernels instead of compiling them again."""

from __future__ import annotations

import os
from pathlib import Path

from mbc.core.artifacts import unwritable
from mbc.core.layout import Layout


def use_outdir_compile_cache(run_dir) -> None:
    """One inductor cache per outdir (<outdir>/.mbc/torch_compile): every later job of the
    same shape loads the compiled kernels instead of compiling them again (README:
    "Training speed"). A TORCHINDUCTOR_CACHE_DIR set by the user wins. One that cannot be
    written to (Inductor would fail every job) is replaced by a temporary one, said in one
    line and removed when the job ends."""
    import atexit
    import shutil
    import tempfile

    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or str(
        Layout.of_run_dir(Path(run_dir).resolve()).compile_cache
    )
    if (why := unwritable(cache)) is not None:
        scratch = tempfile.mkdtemp(prefix="mbc-torch-compile-")
        atexit.register(shutil.rmtree, scratch, ignore_errors=True)
        print(
            f"mbc: torch compile cache {cache} cannot be written to ({why}): this job "
            f"compiles in {scratch} (removed when it ends)"
        )
        cache = scratch
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
