"""mbc: the reproducible pipeline for "Marginals Before Conditionals" (arXiv 2603.10074)."""

__version__ = "0.1.0"
