# Data stage: fetch each dataset from the data dir, the offline mirror or its canonical URL, verify sha256.


rule fetch_dataset:
    output:
        stamp=f"{DATA}/{{dataset}}/.verified",
    log:
        f"{LOGS}/data/{{dataset}}.log",
    conda:
        "../../environment.yml"
    resources:
        mem_mb=FETCH_MEM_MB,
        runtime=FETCH_RUNTIME,
    shell:
        "python -m fedrepro data fetch {wildcards.dataset} > {log} 2>&1"


rule partition_dataset:
    input:
        stamp=partition_stamp,
    output:
        directory(f"{RES}/data/{{name}}"),
    log:
        f"{LOGS}/data/partition/{{name}}.log",
    conda:
        "../../environment.yml"
    resources:
        mem_mb=PARTITION_MEM_MB,
        runtime=PARTITION_RUNTIME,
    params:
        spec=lambda wildcards: PARTITIONS[wildcards.name],
    shell:
        "python -m fedrepro data partition {wildcards.name} --out {output} > {log} 2>&1"


rule plot_partition:
    input:
        f"{RES}/data/{{name}}",
    output:
        f"{FIGS}/data/{{name}}.png",
    log:
        f"{LOGS}/data/plot/{{name}}.log",
    conda:
        "../../environment.yml"
    resources:
        mem_mb=SMALL_MEM_MB,
        runtime=SMALL_RUNTIME,
    shell:
        "python -m fedrepro data plot {wildcards.name} --input {input} --out {output} > {log} 2>&1"
