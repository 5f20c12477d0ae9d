"""Analysis (fits.smk): power-law fits, the statistics, verdicts, the scorecard, robustness."""
