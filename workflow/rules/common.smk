# Shared helpers: validated config, experiment lookup, output paths. No rules here (catalog convention).
import json
import os
import sys
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError
from snakemake.logging import logger

from fedrepro import paths
from fedrepro.archive.ops import restorable, restore_constraints
from fedrepro.config import (
    load_paper,
    load_partitions,
    paper_seeds,
    resolve_experiment,
    validate_global,
)
from fedrepro.data.sources import can_fetch, is_available, stamp_path
from fedrepro.errors import FedreproError
from fedrepro.experiments import get_kind
from fedrepro.plan import experiment_resources
from fedrepro.report.privacy import has_epsilon_curve
from fedrepro.report.tables import table_artifacts

try:
    CFG = validate_global(config, source="config (config/config.yaml + --config)")
    # The results archive (fedrepro.archive): experiments whose every paper-scale seed is archived, sound and current
    # are restored from it instead of trained (rule restore_archived), and under the default scale mode run at paper
    # scale, so the default report judges them; `--config 'archive={use: false}'` trains everything.
    ARCHIVED = restorable(CFG)
    if CFG["scale"] == "default" and ARCHIVED:
        # an experiment that only reads an archived experiment's runs (kept models, its summary; no training of its
        # own) runs at its scale too
        readers = {
            f"{p}.{name}": f"{p}.{get_kind(e['kind']).reads_runs(e['params'])}"
            for p in CFG["papers"]
            for name, e in load_paper(CFG, p)["experiments"].items()
            if get_kind(e["kind"]).follows_read_scale(e["params"])
        }
        paper_now = [*ARCHIVED, *(r for r, read in readers.items() if read in ARCHIVED)]
        CFG["default_scales"] = {**{e: "paper" for e in paper_now}, **(CFG.get("default_scales") or {})}
    PAPERS = {p: load_paper(CFG, p) for p in CFG["papers"]}
    # The scale mode (default | quick | paper): each experiment resolves the scale it runs at (its `default_scale`
    # under `default`; paper when it has no quick overrides) and keeps it as EXPERIMENTS[id].scale.
    SCALE = CFG["scale"]
    # Resolving every experiment validates its parameters now, before any job starts.
    EXPERIMENTS = {
        f"{p}.{name}": resolve_experiment(CFG, f"{p}.{name}", SCALE)
        for p, doc in PAPERS.items()
        for name in doc["experiments"]
    }
    PARTITIONS = load_partitions(CFG)
except FedreproError as exc:
    raise WorkflowError(str(exc)) from None

# Jobs call `python -m fedrepro`: make `python` the interpreter running Snakemake (e.g. .venv/bin/snakemake
# without an activated venv). With --use-conda the rule's environment is activated after this and wins.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def P(pattern, /, **fields):
    """Output path pattern ``pattern`` of fedrepro.paths (the one place paths are spelled): configured directories
    filled in, the fields given filled in, every other field left as a Snakemake wildcard."""
    return paths.rule_pattern(CFG, pattern, **fields)


# Global settings every CLI call must share with this Snakemake invocation (paths, papers, data mirror): passed
# to the jobs in the environment, not as params, so that e.g. building one paper (only_papers) or moving the mirror
# does not rerun finished experiments. The CLI merges dicts into config/config.yaml, so only_papers names the
# papers this invocation builds.
_CLI_SETTINGS = {
    k: CFG[k]
    for k in (
        "papers",
        "targets",
        "partitions",
        "data",
        "results_dir",
        "figures_dir",
        "default_scales",
        "extra_methods",
        "archive",
    )
    if k in CFG
}
_CLI_SETTINGS["only_papers"] = list(CFG["papers"])
os.environ["FEDREPRO_WORKFLOW_CONFIG"] = json.dumps(_CLI_SETTINGS)


def seeds(scale, paper=None, exp=None):
    """The seeds of a scale: the experiment's own `seeds.<scale>` when it sets them, else config.yaml's."""
    return paper_seeds(CFG, PAPERS[paper]["experiments"][exp] if exp else {}, scale)


# data.online (config, or `--config 'data={online: true}'`): on a networked machine the default target also takes
# every experiment whose data can be fetched, and rule fetch_dataset fetches it on demand; offline (the default)
# only what is available here.
ONLINE = bool(CFG["data"].get("online", False))


def data_ready(dataset):
    """A dataset the default target may read: available here, or (online) fetchable."""
    return is_available(CFG, dataset) or (ONLINE and can_fetch(CFG, dataset))


def restored(exp_id):
    """An experiment taken from the results archive: every seed of the scale it runs at is archived (paper scale)."""
    return exp_id in ARCHIVED and EXPERIMENTS[exp_id].scale == "paper"


def runnable(exp_id):
    """An experiment runs here when every dataset it reads is present locally or in the mirror (online: or can be
    fetched), or when it is restored from the results archive (no data needed)."""
    return restored(exp_id) or all(data_ready(d) for d in EXPERIMENTS[exp_id].datasets)


RUN_FILES = ("metrics.json", "history.parquet", "config.yaml")  # rule run_experiment's outputs


def run_files(paper, exp, scale=None, file="metrics.json"):
    """One run per seed of the scale (the experiment's own scale by default), its file ``file``; a deterministic kind
    (no randomness) runs once, at the scale's first seed."""
    scale = scale or EXPERIMENTS[f"{paper}.{exp}"].scale
    run_seeds = seeds(scale, paper, exp)
    if EXPERIMENTS[f"{paper}.{exp}"].deterministic:
        run_seeds = run_seeds[:1]
    return [P("run_file", paper=paper, exp=exp, scale=scale, seed=s, file=file) for s in run_seeds]


def summary_file(paper, exp):
    """The summary over seeds of an experiment, at the scale it runs at."""
    return P("summary", paper=paper, exp=exp, scale=EXPERIMENTS[f"{paper}.{exp}"].scale)


def runnable_summaries(paper):
    return [summary_file(paper, e.name) for e in EXPERIMENTS.values() if e.paper == paper and runnable(e.id)]


def runnable_runs(paper):
    """Every file of every seed's run of the runnable experiments. Asked for by the default target itself:
    Snakemake does not rebuild a missing input of a job whose outputs are up to date, nor a missing output of a job
    that nothing asks for, so with only the summaries (or only metrics.json) asked for, a deleted seed's file would
    go unnoticed."""
    return [
        f
        for e in EXPERIMENTS.values()
        if e.paper == paper and runnable(e.id)
        for file in RUN_FILES
        for f in run_files(paper, e.name, file=file)
    ]


def left_out_by_data():
    """{dataset: [experiment ids]} of the experiments left out of the default target because a dataset they read
    is not available here."""
    out = {}
    for exp_id, e in EXPERIMENTS.items():
        for d in e.datasets:
            if not data_ready(d):
                out.setdefault(d, []).append(exp_id)
    return out


_LEFT_OUT_WARNED = False


def warn_left_out():
    """Say once, on the console, which experiments the default target leaves out for want of data (the report
    lists them per target as 'not run: data unavailable offline')."""
    global _LEFT_OUT_WARNED
    if _LEFT_OUT_WARNED:
        return
    _LEFT_OUT_WARNED = True
    missing = left_out_by_data()
    if not missing:
        return
    n = len({x for ids in missing.values() for x in ids})
    lines = [f"  {d}: {', '.join(ids)}" for d, ids in sorted(missing.items())]
    logger.warning(
        f"fedrepro: {n} experiment(s) left out of the default target, their data being unavailable here (not in "
        f"{CFG['data']['dir']}/ or the mirror {CFG['data'].get('mirror')}); the report lists them as not run. By missing dataset:\n"
        + "\n".join(lines)
        + "\n  on a networked machine: `python -m fedrepro data fetch --all` (or DATASET), or run snakemake with "
        + "--config 'data={online: true}'; or set data.mirror."
    )


def figure_files(paper, ext):
    figs = PAPERS[paper].get("figures") or {}
    return [
        P("figure", paper=paper, fig=name, ext=ext)
        for name, spec in figs.items()
        if runnable(f"{paper}.{spec['experiment']}")
    ]


def table_files(paper):
    if paper not in CFG.get("targets", {}):
        return []
    return [
        P("table", paper=paper, table=name, ext=ext)
        for name in table_artifacts(CFG, paper).values()
        for ext in ("csv", "md")
    ]


def experiment_inputs(wildcards):
    """Verified datasets and built partitions an experiment reads, and for a kind that reads another experiment's
    runs (Kind.reads_runs: kept final models, a summary), those runs and their summary at its own scale."""
    exp = EXPERIMENTS[f"{wildcards.paper}.{wildcards.exp}"]
    out = [P("dataset_stamp", dataset=d) for d in exp.datasets] + [P("partition", name=p) for p in exp.partitions]
    reads = get_kind(exp.kind).reads_runs
    read = reads(exp.params) if reads else None
    if read:
        out += run_files(exp.paper, read, wildcards.scale) + [
            P("summary", paper=exp.paper, exp=read, scale=wildcards.scale)
        ]
    return out


# Fixed resources of the small jobs (aggregate_seeds, figure, table, privacy_tables, privacy_figure, report,
# plot_partition). Measured with /usr/bin/time -v on the 2-core VM (quick scale, CPU shared): peak RSS 0.11-0.23 GB,
# wall 5-35 s (privacy tables 34 s, report ~7 s, the rest <= 16 s); 1 GB and 15 min leave >= 4x headroom.
SMALL_MEM_MB = 1000
SMALL_RUNTIME = 15
# fetch_dataset: hashing streams the file; the wall time is the download (CIFAR-100, ~170 MB, the largest archive).
FETCH_MEM_MB = 1000
FETCH_RUNTIME = 60
# partition_dataset holds the whole source dataset as float32 while it writes features.npy: the largest, LEAF
# FEMNIST (~800k 28x28 images) / TFF EMNIST, is ~2.5 GB; 8 GB covers it with the parsed source beside it.
PARTITION_MEM_MB = 8000
PARTITION_RUNTIME = 60


def run_resources(wildcards):
    """threads, mem_mb, runtime (minutes), gpu of one run: config.yaml's resources.<scale>, at paper scale those
    derived from the experiment's cost in config/compute.yaml, then the experiment's resources.<scale> in
    config/<paper>.yaml (used by the SLURM profile; threads also locally)."""
    entry = PAPERS[wildcards.paper]["experiments"][wildcards.exp]
    return experiment_resources(CFG, entry, wildcards.scale, f"{wildcards.paper}.{wildcards.exp}")


def resolved_params(wildcards):
    """The experiment's resolved parameters: a change in config/<paper>.yaml reruns exactly that experiment; for a
    kind that reads more (a forensic sweep: the swept experiment and registry rows), what it reads too. Not the
    kind's annotations (a sweep's paper_issue: the report words its conclusions as the config does)."""
    exp_id = f"{wildcards.paper}.{wildcards.exp}"
    exp = resolve_experiment(CFG, exp_id, wildcards.scale)
    kind = get_kind(exp.kind)
    reads = kind.read_inputs(exp.params, CFG, exp_id)
    params = {k: v for k, v in exp.params.items() if k not in kind.annotations}
    doc = params if reads is None else {"params": params, "reads": reads}
    return yaml.safe_dump(doc, sort_keys=True, default_flow_style=True).strip()


# Only configured figures match rule figure (figures/data/*.png and privacy_epsilon belong to other rules).
_FIGURES = {p: sorted((doc.get("figures") or {})) for p, doc in PAPERS.items()}
FIGURE_PAPERS = "|".join(p for p, figs in _FIGURES.items() if figs) or "(?!)"
FIGURE_NAMES = "|".join(sorted({f for figs in _FIGURES.values() for f in figs})) or "(?!)"


def figure_inputs(wildcards):
    """A figure reads its experiment's summary and every seed's history (fedrepro.plots.render_figure)."""
    spec = PAPERS[wildcards.paper]["figures"][wildcards.fig]
    return {
        "summary": summary_file(wildcards.paper, spec["experiment"]),
        "runs": run_files(wildcards.paper, spec["experiment"]),
        "histories": run_files(wildcards.paper, spec["experiment"], file="history.parquet"),
    }


def available_partitions():
    """Partitions whose dataset is available here."""
    return [name for name, spec in PARTITIONS.items() if data_ready(spec["dataset"])]


def partition_plots():
    """Look-at-the-data plots of every partition whose dataset is available here."""
    return [P("partition_plot", name=name) for name in available_partitions()]


def partition_stamp(wildcards):
    return P("dataset_stamp", dataset=PARTITIONS[wildcards.name]["dataset"])


REPORT_FILES = [P("report", ext=ext) for ext in ("md", "csv", "html")]


def privacy_summaries(paper):
    """Summaries of the paper's privacy-stage experiments (accounting; no datasets, always runnable)."""
    return [summary_file(paper, e.name) for e in EXPERIMENTS.values() if e.paper == paper and e.stage == "privacy"]


def privacy_runs(paper):
    """The run files the privacy stage reads besides the summaries: metrics and history of each privacy-stage
    experiment's run (fedrepro.report.privacy)."""
    return [
        f
        for e in EXPERIMENTS.values()
        if e.paper == paper and e.stage == "privacy"
        for file in ("metrics.json", "history.parquet")
        for f in run_files(paper, e.name, file=file)
    ]


def privacy_outputs():
    """Per paper with privacy experiments: epsilon.csv + curves.csv, and the epsilon-vs-rounds figure when it has
    epsilon curves."""
    out = []
    for paper in PAPERS:
        exps = [e for e in EXPERIMENTS.values() if e.paper == paper and e.stage == "privacy"]
        if exps:
            out += [P("privacy_table", paper=paper, name=f) for f in ("epsilon", "curves")]
        if any(has_epsilon_curve(e) for e in exps):
            out += [P("figure", paper=paper, fig="privacy_epsilon", ext=ext) for ext in ("pdf", "png")]
    return out


# restore_archived matches only archived experiments (each paper with its own archived names)
RESTORED = restore_constraints(ARCHIVED)


def archived_files(wildcards):
    """The archived run's manifest and files (rule restore_archived's input); none for an experiment or seed the
    archive does not hold (then rule run_experiment makes the file)."""
    exp_id = f"{wildcards.paper}.{wildcards.exp}"
    if exp_id not in ARCHIVED or int(wildcards.seed) not in ARCHIVED[exp_id]:
        raise WorkflowError(f"{exp_id} seed {wildcards.seed} is not in the results archive")
    run = P("archive_run", paper=wildcards.paper, exp=wildcards.exp, scale="paper", seed=wildcards.seed)
    return [f"{run}/manifest.json"] + [f"{run}/{f}" for f in RUN_FILES]


def all_outputs(wildcards=None):
    """The default target (rule all's input function, so the warning comes only when it is built)."""
    warn_left_out()
    out = []
    for paper in PAPERS:
        out += (
            runnable_runs(paper) + runnable_summaries(paper) + figure_files(paper, "pdf") + figure_files(paper, "png")
        )
        out += table_files(paper)
    partitions = [P("partition", name=name) for name in available_partitions()]
    return out + extra_tables() + privacy_outputs() + partitions + partition_plots() + REPORT_FILES


# config extra_methods: name -> FILE:CLASS, each one more row of every runnable experiment whose kind can run it
EXTRA_METHODS = dict(CFG.get("extra_methods") or {})
EXTRA_NAMES = "|".join(sorted(EXTRA_METHODS)) or "(?!)"


def extra_experiments():
    """The runnable experiments whose kind runs an engine Algorithm from outside the package (a method slot whose
    interface is the Algorithm; a histogram estimator runs through `python -m fedrepro compare`)."""
    return [
        e
        for e in EXPERIMENTS.values()
        if runnable(e.id)
        and get_kind(e.kind).method_slot is not None
        and get_kind(e.kind).method_slot.interface is None
    ]


def extra_tables():
    """Every extra method's table (Markdown and CSV) of every such experiment; none without extra_methods."""
    return [
        P("extra_table", method=name, paper=e.paper, exp=e.name, scale=e.scale, ext=ext)
        for name in EXTRA_METHODS
        for e in extra_experiments()
        for ext in ("md", "csv")
    ]
