# Data stage: fetch each dataset from the data dir, the offline mirror or its canonical URL, verify sha256.


rule fetch_dataset:
    output:
        stamp=P("dataset_stamp"),
    log:
        P("dataset_log"),
    conda:
        "../../environment.yml"
    resources:
        mem_mb=FETCH_MEM_MB,
        runtime=FETCH_RUNTIME,
    shell:
        "python -m fedrepro data fetch {wildcards.dataset} > {log:q} 2>&1"


rule partition_dataset:
    input:
        stamp=partition_stamp,
    output:
        directory(P("partition")),
    log:
        P("partition_log"),
    conda:
        "../../environment.yml"
    resources:
        mem_mb=PARTITION_MEM_MB,
        runtime=PARTITION_RUNTIME,
    params:
        spec=lambda wildcards: PARTITIONS[wildcards.name],
    shell:
        "python -m fedrepro data partition {wildcards.name} --out {output:q} > {log:q} 2>&1"


rule plot_partition:
    input:
        P("partition"),
    output:
        P("partition_plot"),
    log:
        P("partition_plot_log"),
    conda:
        "../../environment.yml"
    resources:
        mem_mb=SMALL_MEM_MB,
        runtime=SMALL_RUNTIME,
    shell:
        "python -m fedrepro data plot {wildcards.name} --input {input:q} --out {output:q} > {log:q} 2>&1"
