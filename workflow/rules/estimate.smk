# Train/estimate stage: one job per (experiment, scale, seed), then mean ± std over seeds.


rule run_experiment:
    input:
        experiment_inputs,
    output:
        metrics=P("run_file", file="metrics.json"),
        history=P("run_file", file="history.parquet"),
        config=P("run_file", file="config.yaml"),
    log:
        P("run_log"),
    wildcard_constraints:
        scale="quick|paper",
        seed=r"\d+",
    conda:
        "../../environment.yml"
    threads: lambda wildcards: run_resources(wildcards)["threads"]
    resources:
        mem_mb=lambda wildcards: run_resources(wildcards).get("mem_mb"),
        runtime=lambda wildcards: run_resources(wildcards).get("runtime"),
        gpu=lambda wildcards: run_resources(wildcards)["gpu"],
    params:
        resolved=resolved_params,
        outdir=lambda wildcards, output: Path(output.metrics).parent,
    # the job's torch threads are the threads Snakemake gave it (FEDREPRO_THREADS), idle OpenMP threads sleeping
    # instead of spinning (OMP_WAIT_POLICY=PASSIVE: two jobs on two cores do not steal each other's cycles)
    shell:
        "FEDREPRO_THREADS={threads} OMP_WAIT_POLICY=PASSIVE "
        "python -m fedrepro run {wildcards.paper}.{wildcards.exp} --seed {wildcards.seed} "
        "--scale {wildcards.scale} --out {params.outdir:q} > {log:q} 2>&1"


# An experiment whose every paper-scale seed is in the results archive (fedrepro.archive) is restored, not trained:
# the archived files, checked against their manifest and against the current config and data, copied into the run
# directory with archived.json saying where they came from (the report's source column).
ruleorder: restore_archived > run_experiment


rule restore_archived:
    input:
        archived_files,
    output:
        metrics=P("run_file", file="metrics.json"),
        history=P("run_file", file="history.parquet"),
        config=P("run_file", file="config.yaml"),
        source=P("run_file", file="archived.json"),
    log:
        P("restore_log"),
    wildcard_constraints:
        paper=RESTORED["paper"],
        exp=RESTORED["exp"],
        scale="paper",
        seed=r"\d+",
    conda:
        "../../environment.yml"
    resources:
        mem_mb=SMALL_MEM_MB,
        runtime=SMALL_RUNTIME,
    params:
        outdir=lambda wildcards, output: Path(output.metrics).parent,
    shell:
        "python -m fedrepro archive restore --experiment {wildcards.paper}.{wildcards.exp} --seed {wildcards.seed} "
        "--out {params.outdir:q} > {log:q} 2>&1"


rule aggregate_seeds:
    input:
        runs=lambda wildcards: run_files(wildcards.paper, wildcards.exp, wildcards.scale),
    output:
        summary=P("summary"),
    log:
        P("aggregate_log"),
    wildcard_constraints:
        scale="quick|paper",
    conda:
        "../../environment.yml"
    resources:
        mem_mb=SMALL_MEM_MB,
        runtime=SMALL_RUNTIME,
    params:
        dirs=lambda wildcards, input: [Path(p).parent for p in input.runs],
    shell:
        "python -m fedrepro aggregate --runs {params.dirs:q} --out {output.summary:q} > {log:q} 2>&1"
