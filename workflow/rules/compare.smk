# Methods from outside the package (config extra_methods: name -> FILE:CLASS): each compatible experiment's table with
# the method as one more row, beside the paper's methods of the workflow's own runs (only the method is trained).
# Resources: those of one run of the experiment. The job trains one method for each of the scale's seeds, a run all
# of the paper's methods for one seed: measured on the 2-core VM, adaped.table4_femnist_sample quick, FedProx over 3
# seeds in 62 s against 3.2-3.5 min per seed's run (8 methods).


rule compare_method:
    input:
        method=lambda wildcards: EXTRA_METHODS[wildcards.method].rsplit(":", 1)[0],
        runs=lambda wildcards: run_files(wildcards.paper, wildcards.exp, wildcards.scale),
    output:
        md=P("extra_table", ext="md"),
        csv=P("extra_table", ext="csv"),
    log:
        P("extra_log"),
    wildcard_constraints:
        method=EXTRA_NAMES,
        scale="quick|paper",
    conda:
        "../../environment.yml"
    threads: lambda wildcards: run_resources(wildcards)["threads"]
    resources:
        mem_mb=lambda wildcards: run_resources(wildcards).get("mem_mb"),
        runtime=lambda wildcards: run_resources(wildcards).get("runtime"),
        gpu=lambda wildcards: run_resources(wildcards)["gpu"],
    params:
        spec=lambda wildcards: EXTRA_METHODS[wildcards.method],
        seeds=lambda wildcards: " ".join(str(s) for s in seeds(wildcards.scale, wildcards.paper, wildcards.exp)),
        runs=lambda wildcards, input: [Path(p).parent for p in input.runs],
        outdir=lambda wildcards, output: Path(output.md).parent,
    shell:
        "python -m fedrepro compare {params.spec:q} --experiment {wildcards.paper}.{wildcards.exp} "
        "--scale {wildcards.scale} --seeds {params.seeds} --baselines {params.runs:q} "
        "--out {params.outdir:q} > {log:q} 2>&1"
