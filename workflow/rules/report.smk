# Verdicts, scorecard, figures and the paper. Figures and tables read only aggregated
# tables, so naming one figure's file rebuilds that figure alone (nothing upstream reruns
# while its inputs are up to date).


rule routing_heads:
    input:
        attention=f"{OUT}/routing_attention.csv",
        ablation=f"{OUT}/routing_ablation.csv",
    output:
        report(
            f"{OUT}/routing_heads.csv",
            category="Tables",
            caption="../report/routing_heads.rst",
        ),
    log:
        f"{OUT}/logs/routing_heads.log",
    conda:
        "../../envs/mbc.yaml"
    script:
        "../scripts/routing_heads.py"


rule statistics:
    input:
        tau=f"{OUT}/tau.csv",
        fits=f"{OUT}/fits.csv",
        collective_summary=f"{OUT}/collective_summary.csv",
        routing_ablation=f"{OUT}/routing_ablation.csv",
        hessian=f"{OUT}/hessian.csv",
    output:
        report(
            f"{OUT}/statistics.csv",
            category="Tables",
            caption="../report/statistics.rst",
        ),
    log:
        f"{OUT}/logs/statistics.log",
    conda:
        "../../envs/mbc.yaml"
    params:
        raw={
            **{k: CFG.raw[k] for k in ("bootstrap", "statistics")},
            "diverged": CFG.raw.get("diverged", "exclude"),
        },
    script:
        "../scripts/statistics.py"


rule hypotheses:
    input:
        f"{OUT}/statistics.csv",
    output:
        report(
            f"{OUT}/hypotheses.csv",
            category="Tables",
            caption="../report/hypotheses.rst",
        ),
    log:
        f"{OUT}/logs/hypotheses.log",
    conda:
        "../../envs/mbc.yaml"
    params:
        hypotheses=CFG.raw["hypotheses"],
    script:
        "../scripts/hypotheses.py"


rule robustness:
    input:
        tau=f"{OUT}/tau.csv",
        statistics=f"{OUT}/statistics.csv",
    output:
        init_scale=f"{OUT}/init_scale.csv",
        init_comparison=f"{OUT}/init_comparison.csv",
        robustness=report(
            f"{OUT}/robustness.csv",
            category="Tables",
            caption="../report/robustness.rst",
        ),
    log:
        f"{OUT}/logs/robustness.log",
    conda:
        "../../envs/mbc.yaml"
    params:
        raw={
            **{k: CFG.raw[k] for k in ("robustness", "bootstrap")},
            "diverged": CFG.raw.get("diverged", "exclude"),
        },
    script:
        "../scripts/robustness.py"


rule scorecard:
    input:
        f"{OUT}/statistics.csv",
    output:
        report(
            f"{OUT}/scorecard.csv",
            category="Tables",
            caption="../report/scorecard.rst",
        ),
    log:
        f"{OUT}/logs/scorecard.log",
    conda:
        "../../envs/mbc.yaml"
    params:
        rows=CFG.raw["scorecard"],
    script:
        "../scripts/scorecard.py"


rule figure:
    input:
        unpack(lambda wc: {t: f"{OUT}/{t}.csv" for t in TABLES_NEEDED[wc.figure]}),
    output:
        pdf=f"{OUT}/figures/{{figure}}.pdf",
        png=report(
            f"{OUT}/figures/{{figure}}.png",
            category="Figures",
            caption="../report/figure.rst",
        ),
    log:
        f"{OUT}/logs/figures/{{figure}}.log",
    wildcard_constraints:
        figure="|".join(FIGURES),
    conda:
        "../../envs/mbc.yaml"
    script:
        "../scripts/figure.py"


rule tex:
    input:
        tau=f"{OUT}/tau.csv",
        fits=f"{OUT}/fits.csv",
        statistics=f"{OUT}/statistics.csv",
        hypotheses=f"{OUT}/hypotheses.csv",
        scorecard=f"{OUT}/scorecard.csv",
        init_scale=f"{OUT}/init_scale.csv",
        init_comparison=f"{OUT}/init_comparison.csv",
        robustness=f"{OUT}/robustness.csv",
    output:
        numbers=f"{OUT}/tex/numbers.tex",
        fits=f"{OUT}/tex/tables/fits.tex",
        hypotheses=f"{OUT}/tex/tables/hypotheses.tex",
        scorecard=f"{OUT}/tex/tables/scorecard.tex",
        init_scale=f"{OUT}/tex/tables/init_scale.tex",
        init_comparison=f"{OUT}/tex/tables/init_comparison.tex",
        robustness=f"{OUT}/tex/tables/robustness.tex",
    log:
        f"{OUT}/logs/tex.log",
    conda:
        "../../envs/mbc.yaml"
    params:
        preset=CFG.preset,
        labels=CFG.raw.get("labels", {}),
    script:
        "../scripts/tex.py"


rule paper:
    input:
        tex="paper/main.tex",
        generated=rules.tex.output,
        figures=[f"{OUT}/figures/{f}.pdf" for f in FIGURES],
    output:
        report(PAPER_PDF, category="Paper", caption="../report/paper.rst"),
    log:
        f"{OUT}/logs/paper.log",
    conda:
        "../../envs/tex.yaml"
    params:
        texinputs=[f"{OUT}/tex", OUT],
    script:
        "../scripts/paper.py"
