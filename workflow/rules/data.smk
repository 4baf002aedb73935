# Data stage: fetch each dataset from the data dir, the offline mirror or its canonical URL, verify sha256.


rule fetch_dataset:
    output:
        stamp=f"{DATA}/{{dataset}}/.verified",
    log:
        f"{LOGS}/data/{{dataset}}.log",
    conda:
        "../../environment.yml"
    params:
        cli=CLI_CONFIG,
    shell:
        "python -m fedrepro data fetch {wildcards.dataset} {params.cli} > {log} 2>&1"
