"""The rule functions of the report half of the pipeline, from the aggregated tables on:
the power-law fits, the statistics, the verdicts (H1-H7 and our own claims), the scorecard,
and the paper's generated inputs and its PDF. Like `mbc.runs_pipeline` (the runs and their
tables): one function per rule, paths in and out, each table written atomically inside
`built_from` its inputs. Nothing here trains or reads a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from mbc.analysis.config_sections import (
    Bootstrap,
    Fits,
    Hypotheses,
    Robustness,
    Scorecard,
    ScorecardRow,
    Statistics,
)
from mbc.analysis.fit_tables import fit_table, threshold_table
from mbc.analysis.hypotheses import evaluate_hypotheses
from mbc.analysis.robustness import comparison_table, init_scale_table, robustness_table
from mbc.analysis.scorecard import scorecard
from mbc.analysis.stats import compute_statistics
from mbc.core.artifacts import (
    built_from,
    read_csv_checked,
    seal,
    write_csv_atomic,
    write_text_table,
)
from mbc.core.frozen import thaw
from mbc.core.layout import RunPaths
from mbc.core.spec import grid_rows
from mbc.diagnostics.collective import SUMMARY_COLUMNS
from mbc.diagnostics.hessian_table import HESSIAN_COLUMNS, READERS, read_hessian
from mbc.diagnostics.routing import ABLATION_COLUMNS
from mbc.paper import outcome
from mbc.paper.config_sections import Report
from mbc.paper.latexmk import run_latexmk
from mbc.paper.report import (
    definitions_table,
    experiments_table,
    fits_table,
    hypotheses_table,
    init_comparison_tex,
    init_scale_tex,
    numbers,
    numbers_file,
    robustness_numbers,
    robustness_tex,
    scorecard_table,
    statistic_macros,
)


def make_fits(
    fits: Fits,
    boot: Bootstrap,
    diverged: str,
    tau_path,
    hessian_path,
    metrics_path,
    out_fits,
    out_threshold,
    grid: dict[str, int] | None = None,
    run_metrics: Sequence = (),
) -> None:
    """fits.csv and E4's threshold_sensitivity.csv (our taus from the grid rows, like
    tau.csv's: grid maps each run id to its eval grid, `mbc.core.spec.grid_rows`; the
    author's from the sampled evaluation in the train_log.csv beside each of `run_metrics`,
    E4's runs' metrics.csv, as `mbc.runs_pipeline.summarize` reads it). diverged: config
    `diverged` (`Config.diverged`)."""
    tau = read_csv_checked(tau_path, required=["run_id", "tau", "censored", "steps"])
    hess = read_hessian(hessian_path)
    metrics = read_csv_checked(metrics_path, required=["run_id", "step", "candidate_loss"])
    metrics = grid_rows(metrics, grid or {})
    logs = {RunPaths(Path(p).parent).train_log: Path(p).parent.name for p in run_metrics}
    # a run trained before the log existed, or before it had the column: not measured
    read = [log for log in logs if log.exists()]
    sampled = {logs[log]: read_csv_checked(log, required=["step"]) for log in read}
    sampled = {r: t for r, t in sampled.items() if "candidate_loss_sampled" in t}
    table = fit_table(fits.declared, tau, hess, boot, fits.differences, diverged)
    threshold = threshold_table(
        fits.threshold_sensitivity, tau, metrics, boot, diverged, sampled=sampled
    )
    # the logs are written with their runs' metrics.csv, which the stacked metrics.csv's
    # sidecar names: not listed here, where a run directory deleted (a repair) would make
    # these tables look built from files this outdir does not have
    with built_from([tau_path, hessian_path, metrics_path]):
        write_csv_atomic(out_fits, table)
        write_csv_atomic(out_threshold, threshold)
    print(table.to_string())


def make_statistics(
    declared: Statistics, boot: Bootstrap, diverged: str, paths: dict, out_path
) -> None:
    """statistics.csv: the fits' rows, then config `statistics` in its order."""
    t = {k: READERS.get(k, read_csv_checked)(p) for k, p in paths.items()}
    for name, cols in (
        ("collective_summary", SUMMARY_COLUMNS),
        ("routing_ablation", ABLATION_COLUMNS),
        ("hessian", HESSIAN_COLUMNS),
    ):
        if t[name].empty:
            t[name] = pd.DataFrame(columns=cols)
    df = compute_statistics(
        t["tau"],
        t["fits"],
        t["collective_summary"],
        t["routing_ablation"],
        t["hessian"],
        boot,
        declared,
        diverged,
    )
    with built_from(paths.values()):
        write_csv_atomic(out_path, df)
    print(df.to_string())


def make_hypotheses(hypotheses: Hypotheses, statistics_path, out_path) -> None:
    table = evaluate_hypotheses(hypotheses, read_csv_checked(statistics_path, required=["name"]))
    with built_from([statistics_path]):
        write_csv_atomic(out_path, table)
    print(table.drop_duplicates("id")[["id", "verdict"]].to_string(index=False))


def make_robustness(
    cfg: Robustness,
    claims: Sequence[ScorecardRow],
    boot: Bootstrap,
    diverged: str,
    tau_path,
    statistics_path,
    out: dict,
) -> None:
    """E15 (docs/method.md#e15): the init-scale sweep, the default-vs-alternative init
    comparison (config `robustness`) and the verdicts of the scorecard's claims of our own
    (`claims`: the pre-registered statements, `Scorecard.ours`)."""
    tau = read_csv_checked(tau_path, required=["run_id", "experiment", "init", "init_std"])
    stats = read_csv_checked(statistics_path, required=["name", "value", "ci_low", "ci_high"])
    table = robustness_table(claims, stats)
    with built_from([tau_path, statistics_path]):
        write_csv_atomic(out["init_scale"], init_scale_table(tau, cfg.sweep, boot, diverged))
        write_csv_atomic(out["init_comparison"], comparison_table(thaw(cfg.compare), stats))
        write_csv_atomic(out["robustness"], table)
    print(table[["id", "statistic", "value", "ci_low", "ci_high", "verdict"]].to_string())


def make_scorecard(card_cfg: Scorecard, statistics_path, out_csv) -> None:
    card = scorecard(card_cfg.rows, read_csv_checked(statistics_path, required=["name"]))
    with built_from([statistics_path]):
        write_csv_atomic(out_csv, card)
    print(card[["claim", "measured", "paper_reference", "agreement"]].to_string(index=False))


def make_tex(
    preset: str, paths: dict, out: dict, report: Report, questions: dict[str, str]
) -> None:
    """The paper's generated inputs: tables, and numbers.tex from config `report.macros`
    and the report's counts; config `labels` (`report.labels`) names the statistics;
    `questions` (each experiment's, `Config.questions`) the table of experiments."""
    labels = report.label_map()
    t = {k: read_csv_checked(p) for k, p in paths.items()}
    with built_from(paths.values()):
        _write_tex(preset, t, out, report, labels)
        write_text_table(out["experiments"], experiments_table(t["tau"], questions))


def _write_tex(preset: str, t: dict, out: dict, report: Report, labels: dict) -> None:
    """Each generated file with its sidecar (bytes, the tables, the config): the start-up
    check finds one edited or built under other settings."""
    write_text_table(out["fits"], fits_table(t["fits"], labels))
    write_text_table(out["hypotheses"], hypotheses_table(t["hypotheses"], labels))
    write_text_table(out["scorecard"], scorecard_table(t["scorecard"]))
    write_text_table(out["definitions"], definitions_table(t["scorecard"]))
    write_text_table(out["init_scale"], init_scale_tex(t["init_scale"]))
    write_text_table(out["init_comparison"], init_comparison_tex(t["init_comparison"]))
    write_text_table(out["robustness"], robustness_tex(t["robustness"], labels))
    values = numbers(preset, t["tau"], t["hypotheses"], t["scorecard"])
    values.update(statistic_macros(report.macros, t["statistics"]))
    values.update(robustness_numbers(t["robustness"], t["init_scale"], t["tau"]))
    write_text_table(out["numbers"], numbers_file(values))
    card, hyp = t["scorecard"], t["hypotheses"]
    write_text_table(out["abstract"], outcome.abstract(card, hyp))
    write_text_table(out["explanations"], outcome.explanations(card, hyp, report.scale_note))
    write_text_table(out["conclusion"], outcome.conclusion(card, hyp, t["robustness"]))


def compile_paper(tex_path, texinputs: list, out_pdf, inputs: list | None = None) -> None:
    """The paper's PDF (`mbc.paper.latexmk`), sealed with what it was built from (`inputs`:
    the generated sources and figures), so that a PDF older than its tables is never
    reported as the report (`mbc.core.built_by.pdf_stale`)."""
    run_latexmk(tex_path, texinputs, out_pdf)
    with built_from(inputs or []):
        seal(out_pdf)
