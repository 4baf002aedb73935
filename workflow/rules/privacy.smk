# Privacy stage: every epsilon of a paper in one CSV (per setting and accountant, with library versions) and a
# figure of epsilon vs rounds. The accounting itself runs as experiments (rule run_experiment); this collects it.


rule privacy_tables:
    input:
        summaries=lambda wildcards: privacy_summaries(wildcards.paper),
        runs=lambda wildcards: privacy_runs(wildcards.paper),
    output:
        epsilon=P("privacy_table", name="epsilon"),
        curves=P("privacy_table", name="curves"),
    log:
        P("privacy_log", name="tables"),
    conda:
        "../../environment.yml"
    resources:
        mem_mb=SMALL_MEM_MB,
        runtime=SMALL_RUNTIME,
    params:
        scale=SCALE,
        outdir=lambda wildcards, output: Path(output.epsilon).parent,
    shell:
        "python -m fedrepro privacy {wildcards.paper} --out-dir {params.outdir:q} --scale {params.scale} "
        "> {log:q} 2>&1"


rule privacy_figure:
    input:
        summaries=lambda wildcards: privacy_summaries(wildcards.paper),
        runs=lambda wildcards: privacy_runs(wildcards.paper),
        registry=lambda wildcards: CFG.get("targets", {}).get(wildcards.paper, []),
    output:
        pdf=P("figure", fig="privacy_epsilon", ext="pdf"),
        png=report(
            P("figure", fig="privacy_epsilon", ext="png"),
            caption="../report/privacy_figure.rst",
            category="{paper}",
            labels={"paper": "{paper}", "figure": "privacy_epsilon"},
        ),
    log:
        P("privacy_log", name="figure"),
    conda:
        "../../environment.yml"
    resources:
        mem_mb=SMALL_MEM_MB,
        runtime=SMALL_RUNTIME,
    params:
        scale=SCALE,
    shell:
        "python -m fedrepro privacy {wildcards.paper} --figure {output.pdf:q} --png {output.png:q} "
        "--scale {params.scale} > {log:q} 2>&1"
