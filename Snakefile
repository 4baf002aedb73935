# fedrepro: every printed number of four private/personalized FL papers as a rebuildable target.
# Default target (`snakemake --cores 2`): every experiment runnable here at the configured scale, the papers'
# figures and tables, and the replication report (results/report/replication.{md,html,csv}).
from snakemake.utils import min_version

min_version("8.0")

# Read before Snakemake does: for a YAML syntax error its own message names neither the file nor the line.
from pathlib import Path

from snakemake.exceptions import WorkflowError

from fedrepro.config import read_yaml
from fedrepro.errors import FedreproError

CONFIG_FILE = "config/config.yaml"
if Path(CONFIG_FILE).is_file():
    try:
        read_yaml(CONFIG_FILE)
    except FedreproError as exc:
        raise WorkflowError(str(exc)) from None


configfile: CONFIG_FILE


# `snakemake --report report.html` after a run: the replication table, every figure captioned with its paper
# artifact, and run statistics, in one self-contained HTML file.
report: "workflow/report/workflow.rst"


envvars:
    "PATH",


include: "workflow/rules/common.smk"


# Set by common.smk: the global settings every job's CLI call shares (passed on to remote jobs).
envvars:
    "FEDREPRO_WORKFLOW_CONFIG",


include: "workflow/rules/data.smk"
include: "workflow/rules/estimate.smk"
include: "workflow/rules/privacy.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/compare.smk"


rule all:
    default_target: True
    input:
        all_outputs,
