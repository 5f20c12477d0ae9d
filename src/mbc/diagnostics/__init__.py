"""Per-run diagnostics (summary.smk, diagnostics.smk): tau and summaries, collective, routing, Hessian."""
