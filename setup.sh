#!/usr/bin/env bash
# One-time set-up on a fresh machine: a virtual environment in .venv with PyTorch, the mbc
# package, Snakemake (+ Slurm executor plugin) and the dev tools; as root on Debian/Ubuntu
# also the TeX toolchain (paper PDF) and Slurm + munge (the Slurm tests). Idempotent.
#   TORCH_SPEC   pip requirement for torch (default torch==2.13.0: from PyPI on Linux x86_64
#                that is the CUDA build, which also runs on a CPU)
#   TORCH_INDEX  the index torch comes from, e.g. https://download.pytorch.org/whl/cpu for the
#                CPU-only build (~200 MB instead of GBs; the committed measurements ran it)
#   MBC_NO_APT=1 skip the Debian packages
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
APT_PACKAGES="texlive-latex-base texlive-latex-recommended latexmk slurm-wlm munge"

if [ "${MBC_NO_APT:-0}" != 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    missing=""
    for p in $APT_PACKAGES; do
        dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
    done
    if [ -n "$missing" ]; then
        echo "setup: installing Debian packages:$missing"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
    fi
fi

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
if [ -n "${TORCH_INDEX:-}" ]; then
    .venv/bin/python -m pip install -q --index-url "$TORCH_INDEX" "$TORCH_SPEC"
else
    .venv/bin/python -m pip install -q "$TORCH_SPEC"
fi
.venv/bin/python -m pip install -q -e ".[dev,slurm]"
.venv/bin/python -c "import torch, snakemake, mbc; print('setup: torch', torch.__version__, '| cuda', torch.cuda.is_available(), '| mbc', mbc.__version__)"
