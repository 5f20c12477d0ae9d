"""The paper (report.smk): figures, LaTeX tables and numbers."""
