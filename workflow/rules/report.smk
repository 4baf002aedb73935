# Report stage: figures and tables laid out like the papers', and the replication report over every target.


rule figure:
    input:
        unpack(figure_inputs),
    output:
        pdf=P("figure", ext="pdf"),
        png=report(
            P("figure", ext="png"),
            caption="../report/figure.rst",
            category="{paper}",
            labels={"paper": "{paper}", "figure": "{fig}"},
        ),
    log:
        P("figure_log"),
    wildcard_constraints:
        paper=FIGURE_PAPERS,
        fig=FIGURE_NAMES,
    conda:
        "../../environment.yml"
    resources:
        mem_mb=SMALL_MEM_MB,
        runtime=SMALL_RUNTIME,
    params:
        scale=SCALE,
        artifact=lambda wildcards: PAPERS[wildcards.paper]["figures"][wildcards.fig].get("artifact", ""),
        caption=lambda wildcards: PAPERS[wildcards.paper]["figures"][wildcards.fig].get("caption", ""),
    shell:
        "python -m fedrepro figure {wildcards.paper}.{wildcards.fig} --scale {params.scale} "
        "--out {output.pdf:q} --png {output.png:q} > {log:q} 2>&1"


rule table:
    input:
        summaries=lambda wildcards: runnable_summaries(wildcards.paper),
        registry=lambda wildcards: CFG["targets"][wildcards.paper],
    output:
        csv=P("table", ext="csv"),
        md=P("table", ext="md"),
    log:
        P("table_log"),
    conda:
        "../../environment.yml"
    resources:
        mem_mb=SMALL_MEM_MB,
        runtime=SMALL_RUNTIME,
    params:
        scale=SCALE,
        outdir=lambda wildcards, output: Path(output.csv).parent,
    shell:
        "python -m fedrepro tables {wildcards.paper} --only {wildcards.table} --scale {params.scale} "
        "--out-dir {params.outdir:q} > {log:q} 2>&1"


rule report:
    input:
        summaries=[s for p in PAPERS for s in runnable_summaries(p)],
        figures=[f for p in PAPERS for f in figure_files(p, "png")],
        privacy=privacy_outputs(),
        extra=extra_tables(),
        registries=list(CFG.get("targets", {}).values()),
        papers=list(CFG["papers"].values()),
    output:
        md=REPORT_FILES[0],
        csv=report(
            REPORT_FILES[1],
            caption="../report/replication.rst",
            category="Replication",
            labels={"table": "every target (csv)"},
        ),
        html=report(
            REPORT_FILES[2],
            caption="../report/replication.rst",
            category="Replication",
            labels={"table": "every target (html)"},
        ),
    log:
        P("report_log"),
    conda:
        "../../environment.yml"
    resources:
        mem_mb=SMALL_MEM_MB,
        runtime=SMALL_RUNTIME,
    params:
        scale=SCALE,
        outdir=lambda wildcards, output: Path(output[0]).parent,
    shell:
        "python -m fedrepro report --scale {params.scale} --out-dir {params.outdir:q} > {log:q} 2>&1"
