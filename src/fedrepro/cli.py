"""Command line: ``python -m fedrepro <command>``; the Snakemake rules call these same commands.

run EXP --out DIR [--seed N] [--scale S] [--set KEY=VALUE ...]   one seeded run of one experiment
aggregate --runs DIR... --out FILE                                mean ± std over seeds -> summary.json
figure PAPER.FIG --out FILE.pdf [--png FILE.png]                  one paper figure from the summaries
tables PAPER --out-dir DIR                                        the paper's tables (CSV + Markdown)
privacy PAPER [--out-dir DIR] [--figure FILE.pdf [--png FILE.png]] epsilons per accountant + epsilon vs rounds
report --out-dir DIR                                              replication report (md, csv, html)
compare FILE:CLASS --experiment EXP --out DIR [--seeds N ...]     your Algorithm under EXP's protocol, as one more row
ci-check --report FILE                                            fail if a CI-flagged target is not reproduced
data fetch DATASET|--all [--dry-run] [--offline]                  fetch + verify datasets (--dry-run: the plan)
data partition NAME --out DIR                                     build a partition of config/partitions.yaml
data plot NAME --input DIR --out FILE.png                         samples/classes per client of a partition
list                                                              experiments, kinds and datasets
archive add RUN_DIR... | list | verify [--replay R] | compare      the results archive of paper-scale runs
archive restore --experiment PAPER.EXP --seed N --out DIR         an archived run into results/ (the workflow's rule)
plan [--remaining] [--cores N]                                    paper-scale CPU-hours per experiment, campaign order
campaign [PAPER.EXP...] [--seeds N...] [--jobs N] [--commit]     train the seeds the archive lacks, archive each
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

from fedrepro.errors import DISK_FULL, FedreproError, disk_full

CHECKPOINT_DIR = ".checkpoints"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None, help="global config file (default: config/config.yaml)")
    p.add_argument(
        "--config-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a global config key (dotted), e.g. data.mirror=/mnt/mirror",
    )


WORKFLOW_ENV = "FEDREPRO_WORKFLOW_CONFIG"


def _load_cfg(args):
    """config/config.yaml (or --config), then the global settings of the Snakemake invocation that runs this job
    (JSON in $FEDREPRO_WORKFLOW_CONFIG, set by workflow/rules/common.smk), then --config-set."""
    import json

    from fedrepro.config import deep_merge, load_global, parse_overrides

    overrides = json.loads(os.environ.get(WORKFLOW_ENV) or "{}")
    return load_global(args.config, deep_merge(overrides, parse_overrides(args.config_set)))


INPUTS_RECORD = "inputs.json"  # in the checkpoint directory: the input data its checkpoints were made from, and each
# attempt's code version (the files a checkpoint was made with are recorded in that checkpoint)


def _checkpoints_made_from(ckpt: Path, inputs: dict, attempt: dict) -> list[dict]:
    """Keep the checkpoint directory ``ckpt`` (round checkpoints, a forensic sweep's cached points) only if it was
    made from the input data ``inputs`` (fedrepro.provenance.input_digests): checkpoints are keyed on parameters and
    seed, so one made from a partition since rebuilt would resume with state the present data would not make.
    Otherwise the directory is removed and the run starts over, saying why in one line, as it is when its record is
    missing or from an older fedrepro (which kept a directory only while all of the package's source was unchanged).
    Code is judged checkpoint by checkpoint, by the files each was made with (fedrepro.provenance.made_by_this_code).
    The record lists the attempts at the run (``attempt``: this one's code version and start, appended); returns
    the earlier ones."""
    import json

    from fedrepro.files import atomic_write
    from fedrepro.provenance import changed_inputs

    record = ckpt / INPUTS_RECORD
    earlier: list[dict] = []
    why = None
    if not record.is_file() and ckpt.is_dir() and any(ckpt.iterdir()):
        why = "with no record of their data"
    elif record.is_file():
        try:
            before = json.loads(record.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            before = None
        if not isinstance(before, dict) or not isinstance(before.get("attempts"), list):
            why = "whose record is unreadable or from an older fedrepro"
        elif inputs_changed := changed_inputs(before.get("inputs") or {}, inputs):
            why = f"made from other input data ({', '.join(inputs_changed)})"
        else:
            earlier = before["attempts"]
    if why:
        print(f"[fedrepro] {ckpt}: checkpoints {why}: starting over", flush=True)
        shutil.rmtree(ckpt, ignore_errors=True)
    elif ckpt.is_dir():
        # a kill during a save leaves its temporary file (fedrepro.files.atomic_write; ~1 GB for a FedHDP seed);
        # the checkpoint it would have replaced is intact, and the attempt that wrote it is over
        for half_written in ckpt.rglob(".*.tmp"):
            half_written.unlink(missing_ok=True)
    text = json.dumps({"inputs": inputs, "attempts": [*earlier, attempt]}, sort_keys=True)
    atomic_write(record, lambda p: p.write_text(text, encoding="utf-8"))
    return earlier


def _seed(text: str) -> int:
    """argparse type of --seed: an integer >= 0 (numpy's SeedSequence takes no negative entropy)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; seeds are integers >= 0")
    return value


def _positive_float(text: str) -> float:
    """argparse type of a learning rate: a finite number > 0."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text}: give a finite number > 0")
    return value


def _positive(text: str) -> int:
    """argparse type of a count: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: give a whole number >= 1")
    return value


def _writable(path: str | Path, option: str, is_dir: bool) -> Path:
    """Check an output path before any work (fedrepro.files.output_problem: not empty, not the checkout or inside what
    git tracks there, not a special file, short enough) and that ``path`` (a directory when ``is_dir``, else a file)
    can be created or replaced: creates the missing parent directories (removed again if the command fails) and
    probes one with a file."""
    import tempfile

    from fedrepro.checkout import REPO_ROOT
    from fedrepro.errors import ConfigError
    from fedrepro.files import make_output_dirs, output_problem

    problem = output_problem(str(path), is_dir, REPO_ROOT)
    if problem:
        raise ConfigError(f"{option} {str(path)!r}: {problem}")
    path = Path(path)
    folder = path if is_dir else path.parent
    try:
        make_output_dirs(folder)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as exc:
        raise ConfigError(
            f"{option} {path}: cannot write there ({exc.strerror or exc}); choose a writable path"
        ) from None
    return path


def cmd_run(args) -> int:
    from fedrepro.config import parse_overrides, resolve_experiment
    from fedrepro.experiments import RunContext, get_kind
    from fedrepro.experiments.memory import check_memory
    from fedrepro.provenance import code_version
    from fedrepro.run_inputs import run_inputs
    from fedrepro.runio import RunClock, write_run
    from fedrepro.seeding import rng_for

    cfg = _load_cfg(args)
    exp = resolve_experiment(cfg, args.experiment, args.scale, parse_overrides(args.set))
    kind = get_kind(exp.kind)
    check_memory(exp.id, kind.memory, exp.params)  # sizes the machine cannot hold stop here, before any work
    out = _writable(args.out, "--out", is_dir=True)
    # round checkpoints of long runs live beside the outputs until the run completes: a killed job rerun with
    # `snakemake --rerun-incomplete` (or this command again) continues from them, and from the time they carry
    ckpt = None if args.no_checkpoint else out / CHECKPOINT_DIR
    data, partitions, inputs = run_inputs(cfg, exp)
    clock = RunClock()  # the run's compute, as before: from here to the end of the kind's function
    started_from = code_version()  # read (and cached) now: the run records the code it started from, not its end's
    if ckpt is not None:
        attempt = {"code_version": started_from, "started_at": clock.started_at}
        clock.earlier_attempts = _checkpoints_made_from(ckpt, inputs, attempt)
    ctx = RunContext(
        exp_id=exp.id,
        seed=args.seed,
        data=data,
        partitions=partitions,
        checkpoint_dir=ckpt,
        clock=clock,
        config=cfg,
        inputs=inputs,
    )
    print(f"[fedrepro] {exp.id} seed={args.seed} scale={exp.scale} (effective {exp.effective_scale})", flush=True)
    try:
        output = kind.fn(exp.params, rng_for(exp.id, args.seed), ctx)
        wall, resumed = clock.total_s(), (clock.this_attempt_s() if clock.resumed else None)
        reads = kind.read_inputs(exp.params, cfg, exp.id)
        write_run(out, exp, args.seed, output, wall, resumed, inputs, clock, reads, kind.revision)
    except BaseException:
        # an interrupted run keeps its checkpoints; a directory holding only the inputs record is not one
        if ckpt is not None and ckpt.is_dir() and [q.name for q in ckpt.iterdir()] == [INPUTS_RECORD]:
            shutil.rmtree(ckpt, ignore_errors=True)
        raise
    if ckpt is not None:
        shutil.rmtree(ckpt, ignore_errors=True)
    note = "" if resumed is None else f" ({clock.before_s:.2f}s before the resume + {resumed:.2f}s now)"
    print(f"[fedrepro] done in {wall:.2f}s{note} -> {args.out}", flush=True)
    return 0


def cmd_aggregate(args) -> int:
    from fedrepro.aggregate import aggregate_runs

    aggregate_runs([Path(r) for r in args.runs], _writable(args.out, "--out", is_dir=False))
    return 0


def cmd_figure(args) -> int:
    from fedrepro.plots import render_figure

    png = _writable(args.png, "--png", is_dir=False) if args.png else None
    render_figure(_load_cfg(args), args.figure, _writable(args.out, "--out", is_dir=False), png, args.scale)
    return 0


def cmd_tables(args) -> int:
    from fedrepro.report.tables import write_tables

    write_tables(_load_cfg(args), args.paper, _writable(args.out_dir, "--out-dir", is_dir=True), args.scale, args.only)
    return 0


def cmd_privacy(args) -> int:
    from fedrepro.report.privacy import render_privacy_figure, write_privacy_tables

    cfg = _load_cfg(args)
    out_dir = _writable(args.out_dir, "--out-dir", is_dir=True) if args.out_dir else None
    figure = _writable(args.figure, "--figure", is_dir=False) if args.figure else None
    png = _writable(args.png, "--png", is_dir=False) if args.png else None
    if out_dir:
        for path in write_privacy_tables(cfg, args.paper, out_dir, args.scale):
            print(f"[fedrepro] wrote {path}")
    if figure:
        render_privacy_figure(cfg, args.paper, figure, png, args.scale)
    return 0


def cmd_report(args) -> int:
    from fedrepro.report.build import write_report

    compared = [Path(d) for d in args.compared or []]
    write_report(_load_cfg(args), _writable(args.out_dir, "--out-dir", is_dir=True), args.scale, compared)
    return 0


def cmd_compare(args) -> int:
    from fedrepro.compare.method_file import load_method, parse_spec
    from fedrepro.compare.protocol import SEEDS_DIR, compare, slot_of
    from fedrepro.compare.table import write_comparison, write_record
    from fedrepro.config import load_paper, paper_seeds, parse_overrides, resolve_experiment
    from fedrepro.experiments import RunContext
    from fedrepro.learning.engine import Algorithm
    from fedrepro.run_inputs import prepare_inputs, run_inputs

    cfg = _load_cfg(args)
    exp = resolve_experiment(cfg, args.experiment, args.scale)
    slot = slot_of(exp)  # an experiment that cannot run a method is refused before the method file is even read
    cls = load_method(args.method, slot.interface or Algorithm)
    out = _writable(args.out, "--out", is_dir=True)
    paper = load_paper(cfg, exp.paper)
    seeds = args.seeds if args.seeds else paper_seeds(cfg, paper["experiments"][exp.name], exp.scale)
    for line in prepare_inputs(cfg, exp):  # as the workflow's data stage would: fetch, verify, build the partition
        print(f"[fedrepro] {line}", flush=True)
    data, partitions, inputs = run_inputs(cfg, exp)

    def context(seed: int) -> RunContext:
        return RunContext(exp_id=exp.id, seed=seed, data=data, partitions=partitions, config=cfg, inputs=inputs)

    start, method_file = time.monotonic(), parse_spec(args.method)[0]
    method_args = parse_overrides(args.method_arg) if args.method_arg else {}
    comparison = compare(
        exp,
        cls,
        method_file,
        list(seeds),
        context,
        args.baselines or (),
        inputs,
        out / SEEDS_DIR,
        method_args=method_args,
        lr=args.lr,
    )
    has_figure = any(f["experiment"] == exp.name for f in (paper.get("figures") or {}).values())
    written = write_comparison(comparison, out, figure=has_figure)
    written.append(write_record(comparison, out, args.method, inputs, time.monotonic() - start))
    for path in written:
        print(f"[fedrepro] wrote {path}")
    mine = comparison.rows[-1]
    if len(mine.failures) == len(comparison.seeds):  # nothing of the method to compare: the job fails (Snakemake)
        print(
            f"fedrepro: error: {mine.name} failed in every seed ({mine.failures[0]}); the table records why: "
            f"{written[0]}",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_archive(args) -> int:
    from fedrepro.archive import ops, store
    from fedrepro.errors import ConfigError

    cfg = _load_cfg(args)
    if args.action == "add":
        if not args.runs:
            raise ConfigError(
                "archive add: name the run directories to archive, e.g. results/<paper>/<exp>/paper/seed0"
            )
        for run in args.runs:
            entry, new = store.add(cfg, Path(run))
            print(f"[fedrepro] {'archived' if new else 'already archived'}: {run} -> {entry.dir}", flush=True)
            for row in ops.failing_ci_checks(cfg, entry):
                print(f"[fedrepro] warning: a CI row fails in this run (the CI replication check will): {row}")
        return 0
    if args.runs:
        raise ConfigError(f"archive {args.action}: takes no run directories (only `archive add` does)")
    if args.action == "list":
        print(ops.list_text(cfg), end="")
        return 0
    if args.action == "verify":
        return 1 if ops.verify(cfg, args.replay) else 0
    if args.action == "compare":
        print(ops.compare_text(cfg), end="")
        return 0
    if args.experiment is None or args.out is None:  # restore
        raise ConfigError("archive restore: give --experiment PAPER.EXP, --seed N and --out DIR")
    entry = store.restore(cfg, args.experiment, args.seed, _writable(args.out, "--out", is_dir=True))
    print(f"[fedrepro] restored {entry.dir} -> {args.out}", flush=True)
    return 0


def cmd_ci_check(args) -> int:
    from fedrepro.report.cicheck import ci_check, flagged_rows

    return ci_check(Path(args.report), flagged_rows(_load_cfg(args)))


def cmd_data(args) -> int:
    from fedrepro.data.sources import fetch, is_available
    from fedrepro.errors import ConfigError

    cfg = _load_cfg(args)
    if args.all and (args.action != "fetch" or args.dataset):
        raise ConfigError(f"data {args.action}: --all goes with `data fetch` and no dataset id")
    if args.dry_run and args.action != "fetch":
        raise ConfigError(f"data {args.action}: --dry-run goes with `data fetch`")
    if not args.all and not args.dataset:
        raise ConfigError(f"data {args.action}: name a dataset id (or, for fetch, --all)")
    if args.action in ("partition", "plot"):
        return _data_partition(cfg, args)
    if args.action == "fetch":
        from fedrepro import datasets
        from fedrepro.data.catalog import all_datasets, get_dataset

        if args.dry_run:
            return datasets.dry_run(cfg, sorted(all_datasets()) if args.all else [get_dataset(args.dataset).id])
        if args.all:
            return datasets.fetch_all(cfg, offline=args.offline)
        stamp = fetch(cfg, args.dataset, offline=args.offline)
        print(stamp.read_text(), end="")
    else:
        print(f"{args.dataset}: {'available' if is_available(cfg, args.dataset) else 'not available offline'}")
    return 0


def _data_partition(cfg, args) -> int:
    from fedrepro.config import load_partitions
    from fedrepro.errors import ConfigError

    specs = load_partitions(cfg)
    if args.dataset not in specs:
        raise ConfigError(
            f"{cfg.get('partitions')}: partitions.{args.dataset}: no such partition (known: {', '.join(specs)})"
        )
    if args.out is None:
        raise ConfigError(f"data {args.action}: --out is required")
    out = _writable(args.out, "--out", is_dir=args.action == "partition")
    if args.action == "partition":
        from fedrepro.data.fedformat import replaceable
        from fedrepro.data.prepare import prepare

        refused = replaceable(out)
        if refused:
            raise ConfigError(f"data partition --out: {refused}")
        print(f"[fedrepro] wrote {prepare(cfg, args.dataset, specs[args.dataset], out)}")
    else:
        from fedrepro.data.plots import plot_dataset

        if args.input is None:
            raise ConfigError("data plot: --input (the partition directory) is required")
        plot_dataset(Path(args.input), out)
    return 0


def cmd_list(args) -> int:
    from fedrepro.config import list_experiments, load_paper
    from fedrepro.data.catalog import all_datasets
    from fedrepro.experiments import all_kinds, get_kind

    cfg = _load_cfg(args)
    for paper in cfg["papers"]:
        doc = load_paper(cfg, paper)
        for name in list_experiments(cfg, paper):
            e = doc["experiments"][name]
            takes = "compare" if get_kind(e["kind"]).method_slot is not None else "       "
            print(f"{paper}.{name:<18} kind={e['kind']:<28} {takes} {e['description']}")
    print("kinds:", ", ".join(sorted(all_kinds())))
    print("compare: the experiments marked so run a method of your own (python -m fedrepro compare FILE:CLASS ...)")
    print("datasets:", ", ".join(sorted(all_datasets())))
    return 0


def cmd_plan(args) -> int:
    import dataclasses

    from fedrepro.errors import ConfigError
    from fedrepro.plan import load_compute, render, rows

    if args.cores < 1:
        raise ConfigError(f"plan: --cores {args.cores}: give a whole number >= 1")
    cfg = _load_cfg(args)
    plan = rows(cfg)
    if args.remaining:  # what the results archive still lacks: the paper seeds not archived current, per experiment
        from fedrepro.archive.ops import lacking_seeds

        lacking = lacking_seeds(cfg)
        plan = [dataclasses.replace(r, seeds=len(lacking[r.exp_id])) for r in plan if lacking.get(r.exp_id)]
        print("Paper-scale runs the results archive lacks or holds stale (`python -m fedrepro archive list`):")
    print(render(plan, args.cores, load_compute(cfg).get("sources", {}), remaining=args.remaining), end="")
    return 0


def cmd_campaign(args) -> int:
    from fedrepro.archive import campaign
    from fedrepro.errors import ConfigError

    if args.jobs < 1 or args.threads < 1:
        raise ConfigError("campaign: --jobs and --threads take whole numbers >= 1")
    cfg = _load_cfg(args)
    jobs = campaign.queue(cfg, args.experiments, args.seeds)
    print(campaign.plan_text(jobs), end="", flush=True)
    if args.dry_run or not jobs:
        return 0
    version = campaign.require_clean_checkout()
    print(f"[campaign] code {version}; {args.jobs} at a time, {args.threads} thread(s) each", flush=True)
    campaign.prepare_data(cfg, jobs, out=_say)
    cfg_args = [
        *(["--config", args.config] if args.config else []),
        *(a for kv in args.config_set for a in ("--config-set", kv)),
    ]
    failed = campaign.run(
        cfg, jobs, args.jobs, args.commit, lambda job: campaign.spawn(job, args.threads, cfg_args), out=_say
    )
    print(f"[campaign] done: {len(jobs) - failed} of {len(jobs)} archived", flush=True)
    return 1 if failed else 0


def _say(text: str) -> None:
    print(text, flush=True)


def build_parser() -> argparse.ArgumentParser:
    from fedrepro.config import SCALES

    scales = ["default", *SCALES]
    p = argparse.ArgumentParser(prog="fedrepro", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="one seeded run of one experiment")
    r.add_argument("experiment", help="PAPER.NAME: experiment NAME of config/PAPER.yaml")
    r.add_argument("--out", required=True, help="run directory to write")
    r.add_argument(
        "--no-checkpoint",
        action="store_true",
        help=f"do not keep round checkpoints in OUT/{CHECKPOINT_DIR} (default: keep them until the run ends)",
    )
    r.add_argument("--seed", type=_seed, default=0, help="integer >= 0 (default 0)")
    r.add_argument(
        "--scale",
        choices=scales,
        default=None,
        help="default: config's scale (default = the experiment's default_scale)",
    )
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override an experiment param")
    _common(r)
    r.set_defaults(fn=cmd_run)

    a = sub.add_parser("aggregate", help="mean ± std over seeds")
    a.add_argument("--runs", nargs="+", required=True)
    a.add_argument("--out", required=True)
    a.set_defaults(fn=cmd_aggregate)

    f = sub.add_parser("figure", help="render one paper figure")
    f.add_argument("figure", help="PAPER.FIG: figure FIG of config/PAPER.yaml")
    f.add_argument("--out", required=True)
    f.add_argument("--png", default=None)
    f.add_argument("--scale", choices=scales, default=None)
    _common(f)
    f.set_defaults(fn=cmd_figure)

    t = sub.add_parser("tables", help="a paper's tables, laid out like the paper")
    t.add_argument("paper")
    t.add_argument("--out-dir", required=True)
    t.add_argument("--only", default=None, help="one table, e.g. table3")
    t.add_argument("--scale", choices=scales, default=None)
    _common(t)
    t.set_defaults(fn=cmd_tables)

    pv = sub.add_parser("privacy", help="a paper's epsilons per accountant (CSV) and its epsilon-vs-rounds figure")
    pv.add_argument("paper")
    pv.add_argument("--out-dir", default=None, help="write epsilon.csv and <experiment>.csv here")
    pv.add_argument("--figure", default=None, help="write the epsilon-vs-rounds figure (PDF) here")
    pv.add_argument("--png", default=None)
    pv.add_argument("--scale", choices=scales, default=None)
    _common(pv)
    pv.set_defaults(fn=cmd_privacy)

    rep = sub.add_parser("report", help="replication report over every registered target")
    rep.add_argument("--out-dir", required=True)
    rep.add_argument("--scale", choices=scales, default=None)
    rep.add_argument(
        "--compared",
        nargs="+",
        default=None,
        metavar="DIR",
        help="output directories of `compare`: their tables in the section on methods from outside the papers",
    )
    _common(rep)
    rep.set_defaults(fn=cmd_report)

    cmp = sub.add_parser(
        "compare", help="your Algorithm subclass under an experiment's protocol, beside the paper's methods"
    )
    cmp.add_argument("method", help="FILE:CLASS, e.g. examples/fedprox.py:FedProx (README: Compare your method)")
    cmp.add_argument("--experiment", required=True, help="PAPER.NAME of a training experiment")
    cmp.add_argument("--out", required=True, help="for table.md, .csv, differences.csv, figure.png, compare.json")
    cmp.add_argument("--scale", choices=["default", "quick", "paper"], default=None)
    cmp.add_argument("--seeds", type=_seed, nargs="+", default=None, help="default: the scale's seeds")
    cmp.add_argument(
        "--method-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a keyword argument of your method's constructor (YAML value, e.g. mu=0.01); repeat for more",
    )
    cmp.add_argument(
        "--lr",
        type=_positive_float,
        nargs="+",
        default=None,
        metavar="LR",
        help="your method's learning rates in place of the protocol's grid, picked by the protocol's own rule",
    )
    cmp.add_argument(
        "--baselines",
        nargs="+",
        default=None,
        metavar="RUN_DIR",
        help="the workflow's runs of the experiment (one per seed) instead of rebuilding the paper's methods",
    )
    _common(cmp)
    cmp.set_defaults(fn=cmd_compare)

    ar = sub.add_parser("archive", help="the results archive: paper-scale runs kept in the repository")
    ar.add_argument("action", choices=["add", "list", "verify", "compare", "restore"])
    ar.add_argument("runs", nargs="*", metavar="RUN_DIR", help="add: the run directories to archive")
    ar.add_argument(
        "--replay",
        type=_positive,
        default=None,
        metavar="R",
        help="verify: also rerun the first R rounds of one archived seed per experiment and compare",
    )
    ar.add_argument("--experiment", default=None, help="restore: PAPER.EXP")
    ar.add_argument("--seed", type=_seed, default=0, help="restore: the seed")
    ar.add_argument("--out", default=None, help="restore: the run directory to restore into")
    _common(ar)
    ar.set_defaults(fn=cmd_archive)

    c = sub.add_parser("ci-check", help="exit 1 if a CI-flagged target deviates or was not built")
    c.add_argument("--report", required=True, help="replication.csv written by `report`")
    _common(c)
    c.set_defaults(fn=cmd_ci_check)

    d = sub.add_parser("data", help="fetch/check a dataset, or build/plot a partition of config/partitions.yaml")
    d.add_argument("action", choices=["fetch", "status", "partition", "plot"])
    d.add_argument("dataset", nargs="?", help="dataset id (fetch, status) or partition name (partition, plot)")
    d.add_argument("--out", default=None, help="partition: output directory; plot: output PNG")
    d.add_argument("--input", default=None, help="plot: the partition directory")
    d.add_argument("--all", action="store_true", help="fetch: every dataset (goes on past failures; rc 1 if any)")
    d.add_argument(
        "--dry-run",
        action="store_true",
        help="fetch: no network; each dataset's source, size, how it is verified and what it unlocks",
    )
    d.add_argument("--offline", action="store_true", help="never use the network (mirror URLs and canonical URLs)")
    _common(d)
    d.set_defaults(fn=cmd_data)

    lst = sub.add_parser("list", help="experiments, kinds, datasets")
    _common(lst)
    lst.set_defaults(fn=cmd_list)

    pl = sub.add_parser(
        "plan", help="paper-scale CPU-hours, memory and GPU per experiment, and totals (config/compute.yaml)"
    )
    _common(pl)
    pl.add_argument("--cores", type=int, default=2, help="cores the runs share, for the wall-time bound (default 2)")
    pl.add_argument(
        "--remaining",
        action="store_true",
        help="only what the results archive lacks or holds stale, for the experiments the default run builds at "
        "quick scale",
    )
    pl.set_defaults(fn=cmd_plan)

    cp = sub.add_parser(
        "campaign", help="train the paper seeds the results archive lacks, archiving each as it ends (plan --remaining)"
    )
    _common(cp)
    cp.add_argument("experiments", nargs="*", metavar="PAPER.EXP", help="default: plan --remaining's, data here")
    cp.add_argument(
        "--seeds",
        type=_seed,
        nargs="+",
        default=None,
        metavar="N",
        help="these seeds of the named experiments, not the config's (those a raise of seeds: will ask for)",
    )
    cp.add_argument("--jobs", type=int, default=1, help="runs at once (default 1; one per core at one thread)")
    cp.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1)")
    cp.add_argument("--commit", action="store_true", help="commit each archived entry (replacing a stale one)")
    cp.add_argument("--dry-run", action="store_true", help="print the queue and stop")
    cp.set_defaults(fn=cmd_campaign)
    return p


class Terminated(KeyboardInterrupt):
    """SIGTERM (a job scheduler's stop, `kill`): handled as Ctrl-C is, with its own exit status."""


def _terminate(signum, frame) -> None:
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    from fedrepro.files import remove_created_if_empty
    from fedrepro.processes import sleeping_idle_threads

    sleeping_idle_threads()  # before anything imports torch
    args = build_parser().parse_args(argv)
    status = 1
    try:
        status = _main(args)
        return status
    finally:
        if status != 0:
            remove_created_if_empty()  # a failed command leaves no empty output directory behind


def threading_main() -> bool:
    """Whether this is the main thread (only it may install signal handlers: not so under some test runners)."""
    import threading

    return threading.current_thread() is threading.main_thread()


def _main(args) -> int:
    import signal

    previous = signal.signal(signal.SIGTERM, _terminate) if threading_main() else None
    try:
        return _handled(args)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _handled(args) -> int:
    try:
        status = args.fn(args)
        sys.stdout.flush()  # a closed pipe (`... | head`) surfaces here, inside the handler below
        return status
    except FedreproError as exc:
        print(f"fedrepro: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        # Ctrl-C (or SIGINT from Snakemake), SIGTERM: every result is written under a temporary name and renamed into
        # place, so the files there are as they were or complete; a run's round checkpoints let the same command
        # continue
        what = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        print(
            f"fedrepro: {what}: `{args.command}` stopped before it finished; nothing was left half-written "
            "(run the same command again to finish it)",
            file=sys.stderr,
        )
        return 143 if isinstance(exc, Terminated) else 130  # 128 + the signal, what a shell reports
    except MemoryError as exc:
        # a size the kind's memory bound (fedrepro.experiments.memory) does not cover: say so in one line, the
        # allocation that failed included, instead of numpy's traceback
        what = str(exc).splitlines()[0] if str(exc) else "an allocation failed"
        print(
            f"fedrepro: error: out of memory in `{args.command}` ({what}): a parameter asks for more than this "
            "machine holds (e.g. --set batch_size=...); lower it, or run on a machine with more memory",
            file=sys.stderr,
        )
        return 2
    except BrokenPipeError:
        # the reader went away: nothing left to say, and Python must not complain when it flushes stdout at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command killed by a closed pipe
    except OSError as exc:  # a full disk where no writer named its file (atomic writes name theirs)
        if exc.errno not in DISK_FULL:
            raise
        print(f"fedrepro: error: {disk_full(exc.filename or 'a file', exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
