# Verdicts, scorecard, figures and the paper. Figures and tables read only aggregated
# tables, so naming one figure's file rebuilds that figure alone (nothing upstream reruns
# while its inputs are up to date).


rule routing_heads:
    input:
        attention=L.table("routing_attention"),
        ablation=L.table("routing_ablation"),
    output:
        report(
            L.table("routing_heads"),
            category="Tables",
            caption="../report/routing_heads.rst",
        ),
    log:
        L.log("routing_heads"),
    conda:
        "../../envs/mbc.yaml"
    script:
        "../scripts/routing_heads.py"


rule statistics:
    input:
        tau=L.table("tau"),
        fits=L.table("fits"),
        collective_summary=L.table("collective_summary"),
        routing_ablation=L.table("routing_ablation"),
        hessian=L.table("hessian"),
    output:
        report(
            L.table("statistics"),
            category="Tables",
            caption="../report/statistics.rst",
        ),
    log:
        L.log("statistics"),
    conda:
        "../../envs/mbc.yaml"
    params:
        statistics=CFG.statistics,
        bootstrap=CFG.bootstrap,
        diverged=CFG.diverged,
        config_id=CONFIG_ID["statistics"],
    script:
        "../scripts/statistics.py"


rule hypotheses:
    input:
        L.table("statistics"),
    output:
        report(
            L.table("hypotheses"),
            category="Tables",
            caption="../report/hypotheses.rst",
        ),
    log:
        L.log("hypotheses"),
    conda:
        "../../envs/mbc.yaml"
    params:
        hypotheses=CFG.hypotheses,
        config_id=CONFIG_ID["hypotheses"],
    script:
        "../scripts/hypotheses.py"


rule robustness:
    input:
        tau=L.table("tau"),
        statistics=L.table("statistics"),
    output:
        init_scale=L.table("init_scale"),
        init_comparison=L.table("init_comparison"),
        robustness=report(
            L.table("robustness"),
            category="Tables",
            caption="../report/robustness.rst",
        ),
    log:
        L.log("robustness"),
    conda:
        "../../envs/mbc.yaml"
    params:
        robustness=CFG.robustness,
        claims=CFG.scorecard.ours,
        bootstrap=CFG.bootstrap,
        diverged=CFG.diverged,
        config_id=CONFIG_ID["robustness"],
    script:
        "../scripts/robustness.py"


rule scorecard:
    input:
        L.table("statistics"),
    output:
        report(
            L.table("scorecard"),
            category="Tables",
            caption="../report/scorecard.rst",
        ),
    log:
        L.log("scorecard"),
    conda:
        "../../envs/mbc.yaml"
    params:
        scorecard=CFG.scorecard,
        config_id=CONFIG_ID["scorecard"],
    script:
        "../scripts/scorecard.py"


rule figure:
    input:
        unpack(lambda wc: {t: L.table(t) for t in TABLES_NEEDED[wc.figure]}),
    output:
        pdf=L.figure("{figure}", "pdf"),
        png=report(
            L.figure("{figure}", "png"),
            category="Figures",
            caption="../report/figure.rst",
        ),
        caption=L.figure("{figure}", "tex"),
    log:
        L.log("figures", "{figure}"),
    wildcard_constraints:
        figure="|".join(FIGURES),
    conda:
        "../../envs/mbc.yaml"
    params:
        entry=lambda wc: CFG.figures[wc.figure],
        config_id=lambda wc: CFG.figure_config_id(wc.figure),
    script:
        "../scripts/figure.py"


rule tex:
    input:
        tau=L.table("tau"),
        fits=L.table("fits"),
        statistics=L.table("statistics"),
        hypotheses=L.table("hypotheses"),
        scorecard=L.table("scorecard"),
        init_scale=L.table("init_scale"),
        init_comparison=L.table("init_comparison"),
        robustness=L.table("robustness"),
    output:
        **TEX_OUTPUTS,
    log:
        L.log("tex"),
    conda:
        "../../envs/mbc.yaml"
    params:
        preset=CFG.preset,
        report=CFG.report,
        questions=CFG.questions(),
        config_id=CONFIG_ID["tex"],
    script:
        "../scripts/tex.py"


rule paper:
    input:
        tex="paper/main.tex",
        generated=rules.tex.output,
        figures=[L.figure(f, ext) for f in FIGURES for ext in ("pdf", "tex")],
    output:
        report(PAPER_PDF, category="Paper", caption="../report/paper.rst"),
    log:
        L.log("paper"),
    conda:
        "../../envs/tex.yaml"
    params:
        texinputs=[L.tex_dir, OUT],
    script:
        "../scripts/paper.py"


# The console of a run: Snakemake's per-job blocks and counters go to its log file only
# (mbc.workflow.console); a dry run keeps them, they are its plan, and MBC_CONSOLE=full keeps
# them on the console (what tests that read Snakemake's own lines set).
if (
    MAIN_PROCESS
    and not workflow.output_settings.dryrun
    and os.environ.get("MBC_CONSOLE") != "full"
):
    import mbc.workflow.console
    from snakemake.logging import logger as _snakemake_logger

    mbc.workflow.console.quiet_console(_snakemake_logger)


# The console's last line names the report. Snakemake prints its log's path and the run
# time after `onsuccess`, so the line is printed at exit, after them.
# A PDF older than its sources is never named as the report: without latexmk the last line
# says that it is stale, and why.
onsuccess:
    if Path(PAPER_PDF).exists():
        import atexit

        _stale = mbc.core.built_by.pdf_stale(PAPER_PDF)
        atexit.register(
            print,
            f"report: {PAPER_PDF}"
            + (
                f" is STALE ({_stale}; "
                + (
                    "it was not rebuilt)"
                    if shutil.which("latexmk")
                    else "latexmk not found: see paper/README_TEX.md)"
                )
                if _stale
                else ""
            ),
            file=sys.stderr,
        )
