"""Federated training of several methods on one partitioned dataset (the learning tables and figures of the papers).

One run trains every configured method on the same partition, model architecture and schedule with the shared
batched engine (fedrepro.learning.engine.train) and records, per method, the final test accuracy of the deployed
models (mean over clients, %), the learning rate used, and the per-evaluation history (test accuracy, training
loss, and AdaPeD's psi: the trajectories behind the paper's psi statements).
Its trainings (a method at an epsilon and an lr of its grid, each) are independent: a job with threads to spare runs
them in one-thread processes (fedrepro.learning.setup.training_workers says when), with the numbers of one process.

Private methods (``private: true``: DP-FedAvg with local-step noise (``fedavg``) or server-side noise
(``dp_fedavg_server``), DP-AdaPeD, DP-AdaPeD with unsampled client iterations) are trained
once per epsilon of ``privacy.epsilons`` with the noise the privacy module gives for it (fedrepro.experiments.
fl_privacy); their metrics are keyed by epsilon (``acc.<method>.eps_3p35``) and the noise used is recorded.

Learning-rate selection (explicit, recorded): a method's ``lr`` is a number or a grid (App. K's
{0.3, 0.2, 0.15, 0.125, 0.1, 0.075, 0.05}). With a grid, every value is trained and ``select`` picks one:
``final_test`` takes the best final mean test accuracy (GAP: the papers tune on the test clients' accuracy; no
validation split is described), ``final_train_loss`` the lowest final training loss (uses no test data). The
chosen value is metric ``lr.<method>``; the history holds every grid point (column ``lr_grid``).

Checks (``checks``: name -> method names), each a pass/fail statement on the selected runs:
``beats_chance`` (final accuracy above 1/C by 5 points), ``curve`` (the accuracy curve converges: the last evaluation
is not below the first and within 2 points of the run's best; for a private method also not lower at the largest
epsilon than at the smallest, within 1 point),
``psi_decreases`` (psi ends below psi^0, Sec. 4 Results on AdaPeD) and ``psi_decreases_then_increases`` (psi's
minimum is strictly inside the run and psi ends above it, Sec. 4 Results on DP-AdaPeD; every epsilon).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fedrepro.errors import ConfigError
from fedrepro.experiments import Check, RunContext, RunOutput, experiment_kind, only_methods
from fedrepro.experiments.keys import eps_key
from fedrepro.experiments.method_slot import MethodSlot
from fedrepro.experiments.only_methods import ONLY_METHODS
from fedrepro.experiments.params import DELTA, INT1, NONNEG, POSITIVE, POSITIVE_LIST
from fedrepro.learning import algorithms
from fedrepro.learning.setup import SETUP_PROPERTIES, training_setup, training_workers, vectorize
from fedrepro.papers.adaped.fl_privacy import NOISE_FROM, TERMS, plan_noise
from fedrepro.progress import RoundProgress

# The algorithms (fedrepro.learning.algorithms, by Algorithm.name) this kind trains: the methods of AdaPeD's tables.
ALGORITHMS = (
    "local",
    "fedavg",
    "fedavg_ft",
    "dp_fedavg_server",
    "adaped",
    "adaped_unsampled",
    "pfedme",
    "perfedavg",
    "quped",
    "fml",
)
SELECTION = ("final_test", "final_train_loss")
CHECKS = ("beats_chance", "curve", "psi_decreases", "psi_decreases_then_increases")
CURVE_SLACK = 2.0  # points of accuracy the last evaluation may sit below the run's best and still be "converged"

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["partition", "model", "methods", "epochs", "tau", "batch_size"],
    "properties": {
        **SETUP_PROPERTIES,
        "methods": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "required": ["algorithm", "lr"],
                "properties": {
                    "algorithm": {"enum": list(ALGORITHMS)},
                    "lr": {"oneOf": [POSITIVE, {"type": "array", "minItems": 1, "items": POSITIVE}]},
                    "options": {"type": "object", "default": {}},
                    "private": {"type": "boolean", "default": False},
                    # a private method whose noise is that of another algorithm (its accountant and mechanism):
                    # a method from outside the package (fedrepro.compare) is private as DP-FedAvg's local steps;
                    # null: its own algorithm's
                    "privacy_as": {"enum": [None, *sorted(TERMS)], "default": None},
                },
            },
        },
        "privacy": {  # null: no private methods
            "type": ["object", "null"],
            "default": None,
            "additionalProperties": False,
            "required": ["epsilons", "delta", "clip"],
            "properties": {
                "epsilons": POSITIVE_LIST,
                "delta": DELTA,
                "clip": POSITIVE,
                "noise_from": {"enum": list(NOISE_FROM), "default": "thm5"},
            },
        },
        "checks": {
            "type": "object",
            "propertyNames": {"enum": list(CHECKS)},
            "additionalProperties": {"type": "array", "minItems": 1, "items": {"type": "string"}},
            "default": {},
        },
        "epochs": POSITIVE,
        "tau": INT1,
        "batch_size": {"oneOf": [INT1, {"const": "auto"}]},
        "iters_per_epoch": {"anyOf": [INT1, {"type": "null"}], "default": None},  # null: ceil(median n_i / batch)
        "sampling_rate": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 1.0},
        "lr_decay": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 1.0},
        "weight_decay": {**NONNEG, "default": 1e-4},
        "eval_every": {**INT1, "default": 10},
        "select": {"enum": list(SELECTION), "default": "final_test"},
        # train only these methods (names of ``methods``): a forensic reading of some methods, or one method's rerun;
        # checks that name another method are left out. No default: absent, every method trains (and runs made
        # before this option keep their parameter digest)
        "only_methods": ONLY_METHODS,
    },
}


def build_algorithm(algorithm: str, options: dict, weight_decay: float):
    try:
        return algorithms.get_algorithm(algorithm)(weight_decay=weight_decay, **options)
    except (TypeError, ValueError) as exc:  # an option the algorithm does not take, or a value it refuses
        raise ConfigError(f"methods.*.options for {algorithm}: {exc}") from None


def _accounted_as(spec: dict) -> str:
    """The algorithm whose accountant and mechanism privatize a private method (``privacy_as``, else its own)."""
    return spec["privacy_as"] or spec["algorithm"]


def _pick(runs: list[tuple[float, list[dict]]], rule: str) -> tuple[float, list[dict]]:
    """The lr's run the ``select`` rule picks: the best final test accuracy, or the lowest final training loss; a
    value that is not finite (a diverged lr's) ranks last, never first by its place in the grid."""

    def finite(x: float, worst: float) -> float:
        return x if math.isfinite(x) else worst

    if rule == "final_test":
        return max(runs, key=lambda r: finite(r[1][-1]["test_acc"], -math.inf))
    return min(runs, key=lambda r: finite(r[1][-1]["train_loss"], math.inf))


def _validate(p: dict, ctx: RunContext) -> None:
    if p["batch_size"] == "auto" and p["iters_per_epoch"] is None:
        raise ConfigError(f"{ctx.exp_id}: params.batch_size=auto needs params.iters_per_epoch")
    if p["partition"] not in ctx.partitions:
        raise ConfigError(
            f"{ctx.exp_id}: params.partition={p['partition']!r} must be listed in the experiment's "
            f"partitions ({sorted(ctx.partitions)})"
        )
    for name, spec in p["methods"].items():
        if spec["private"]:
            if p["privacy"] is None:
                raise ConfigError(f"{ctx.exp_id}: params.methods.{name}.private needs params.privacy")
            if _accounted_as(spec) not in TERMS:
                raise ConfigError(
                    f"{ctx.exp_id}: params.methods.{name}.private: no accountant for algorithm "
                    f"{spec['algorithm']!r} (private algorithms: {sorted(TERMS)}; or set privacy_as)"
                )
    for check, names in p["checks"].items():
        unknown = sorted(set(names) - set(p["methods"]))
        if unknown:
            raise ConfigError(f"{ctx.exp_id}: params.checks.{check}: unknown methods {unknown}")
    only_methods.validate(p, ctx.exp_id)


# ------------------------------------------------------------------------------------------------------ checks


def _psi_path(hist: list[dict], psi0: float) -> np.ndarray:
    return np.array([psi0] + [h["psi"] for h in hist])


def _check(name: str, method: str, runs: dict, n_classes: int) -> tuple[bool, str]:
    """One check on one method; ``runs`` maps an epsilon key (or None) to (history, psi0, epsilon)."""
    if name == "beats_chance":
        chance = 100.0 / n_classes
        accs = {k: 100 * h[-1]["test_acc"] for k, (h, *_) in runs.items()}
        return all(a > chance + 5 for a in accs.values()), f"{method}: final acc {_fmt(accs)} vs chance {chance:.1f}"
    if name == "curve":
        rise = {
            k: (100 * h[0]["test_acc"], 100 * h[-1]["test_acc"], 100 * max(e["test_acc"] for e in h))
            for k, (h, *_) in runs.items()
        }
        ok = all(last >= first and last >= top - CURVE_SLACK for first, last, top in rise.values())
        detail = f"{method}: first -> last (best) eval acc " + ", ".join(
            f"{_k(k)}{a:.1f}->{b:.1f} ({c:.1f})" for k, (a, b, c) in rise.items()
        )
        if len(runs) > 1:
            keys = sorted(runs, key=lambda k: runs[k][2])  # by epsilon
            lo, hi = 100 * runs[keys[0]][0][-1]["test_acc"], 100 * runs[keys[-1]][0][-1]["test_acc"]
            ok = ok and hi >= lo - 1.0
            detail += f"; acc at the largest epsilon {hi:.1f} vs smallest {lo:.1f}"
        return ok, detail
    paths = {k: _psi_path(h, psi0) for k, (h, psi0, *_) in runs.items()}
    if "psi" not in next(iter(runs.values()))[0][-1]:
        raise ConfigError(f"params.checks.{name}: method {method} has no psi")
    if name == "psi_decreases":
        ok = all(path[-1] < path[0] for path in paths.values())
        return ok, f"{method}: psi " + ", ".join(
            f"{_k(k)}{v[0]:.3f}->min {v.min():.3f}->{v[-1]:.3f}" for k, v in paths.items()
        )
    ok = all(0 < int(path.argmin()) < len(path) - 1 and path[-1] > path.min() + 1e-6 for path in paths.values())
    return ok, f"{method}: psi " + ", ".join(
        f"{_k(k)}{v[0]:.3f}->min {v.min():.3f} (eval {int(v.argmin())}/{len(v) - 1})->{v[-1]:.3f}"
        for k, v in paths.items()
    )


def _k(key: str | None) -> str:
    return "" if key is None else f"{key}: "


def _fmt(values: dict) -> str:
    return ", ".join(f"{_k(k)}{v:.1f}" for k, v in values.items())


# ------------------------------------------------------------------------------------------------ method slot


def _private(p: dict) -> bool:
    """A protocol whose rows are private (Table 2): a method from outside runs with the noise it calibrates."""
    return any(spec["private"] for spec in p["methods"].values())


def _only(p: dict, name: str, private: bool) -> dict:
    """``p`` with the method ``name`` alone: lr over the protocol's grid (every lr a method of the protocol uses,
    chosen by the protocol's ``select``), private as DP-FedAvg's clipped and noised local steps when ``private``."""
    grid = sorted(
        {lr for spec in p["methods"].values() for lr in (spec["lr"] if isinstance(spec["lr"], list) else [spec["lr"]])}
    )
    spec: dict[str, Any] = {
        "algorithm": name,
        "lr": grid if len(grid) > 1 else grid[0],
        "options": {},
        "private": private,
        "privacy_as": "fedavg" if private else None,
    }
    return {k: v for k, v in p.items() if k != "only_methods"} | {"methods": {name: spec}, "checks": {}}


def _with_lr(p: dict, name: str, grid: list[float]) -> dict:
    """The method's run with its own lr grid, chosen by the protocol's ``select`` rule like the paper's methods."""
    spec = p["methods"][name] | {"lr": grid if len(grid) > 1 else grid[0]}
    return p | {"methods": {name: spec}}


def _cells(metrics: dict, name: str) -> dict[str, float]:
    """Test accuracy (%) of one method: column ``acc``, or ``acc <eps key>`` per epsilon of a private method."""
    acc = metrics.get("acc", {}).get(name)
    if isinstance(acc, dict):
        return {f"acc {k}": float(v) for k, v in acc.items()}
    return {} if acc is None else {"acc": float(acc)}


def _curves(history: pd.DataFrame, name: str) -> pd.DataFrame:
    """The selected lr's accuracy (%) vs epoch, one series per epsilon of a private method."""
    h = history[(history["method"] == name) & history["selected"]]
    series = h["epsilon"].map(lambda e: f"eps {e:g}") if "epsilon" in h else pd.Series("", index=h.index)
    return pd.DataFrame({"x": h["epoch"], "y": 100 * h["test_acc"], "series": series})


METHOD_SLOT = MethodSlot(
    only=_only,
    private=_private,
    methods=lambda p: list(p["methods"]),
    cells=_cells,
    curves=_curves,
    x_label="epoch",
    y_label="test accuracy (%)",
    what="test accuracy (%) of the deployed models, mean over clients",
    privacy_note=lambda cls: (
        "privacy by construction: at every local step the protocol clips each sampled client's minibatch gradient "
        "to C and adds N(0, (zC)^2), DP-FedAvg's mechanism with the noise multiplier its accountant calibrates per ε "
        "column, and your method reaches the clients' data only through that release (client_grads / client_sgd "
        "on the step's Released minibatches, once per step): the column's ε holds for it as for DP-FedAvg"
    ),
    releases_steps=True,
    with_lr=_with_lr,
    lr_text="every lr of your grid trained, one picked by the protocol's `select` rule as for the paper's methods "
    "(a diverging lr dropped; the row fails only when every lr diverges)",
)

# ------------------------------------------------------------------------------------------------------ kind


@experiment_kind(
    "adaped_fl_training",
    SCHEMA,
    metrics=(
        "acc.*",
        "acc_weighted.*",
        "lr.*",
        "lr_dropped.*",  # a method from outside: the lrs of its grid that diverged (dropped)
        "final_train_loss.*",
        "psi.*",
        "noise.*",
        "n_clients",
        "clients_per_round",
        "rounds",
        "iters_per_epoch",
        "batch_size",
        "n_params",
    ),
    checks=("beats_chance", "curve", "psi_decreases", "psi_decreases_then_increases"),
    method_slot=METHOD_SLOT,
)
def adaped_fl_training(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    from fedrepro.learning.engine import n_rounds
    from fedrepro.learning.models import n_params

    _validate(p, ctx)
    ds, data, factory, model_kw = training_setup(p, ctx)
    m = ds.n_clients
    seed = int(rng.integers(2**31))  # one seed per run, shared by every method: same init and data order
    schedule = _schedule(p, ds, data.device, seed)
    K, batch, iters = schedule["clients_per_round"], schedule["batch_size"], schedule["iters_per_epoch"]
    rounds = n_rounds(p["epochs"], iters, p["tau"])  # the engine's count: the accountant composes exactly these
    priv = p["privacy"]

    settings = []  # (method, epsilon's key, its noise plan, the trainings of its lr grid)
    for name, spec in only_methods.trained(p).items():
        grid = spec["lr"] if isinstance(spec["lr"], list) else [spec["lr"]]
        noises = [(None, None)]
        if spec["private"]:
            noises = [
                (
                    eps_key(e),
                    plan_noise(
                        _accounted_as(spec),
                        e,
                        K=K,
                        m=m,
                        rounds=rounds,
                        delta=priv["delta"],
                        clip=priv["clip"],
                        noise_from=priv["noise_from"],
                    ),
                )
                for e in priv["epsilons"]
            ]
        for key, plan in noises:
            options = dict(spec["options"]) | (plan.mechanism(_accounted_as(spec)) if plan else {})
            label = f"{name}{'' if key is None else ' ' + key}"
            grid_runs = [_Training(spec["algorithm"], options, lr, f"{label} lr={lr:g}") for lr in grid]
            settings.append((name, key, plan, grid_runs))
    trainings = [t for *_, grid_runs in settings for t in grid_runs]
    done = _in_processes(p, ctx, seed, data.device, trainings)
    if done is None:  # here, in turn: lazily, so that a setting whose every lr diverged stops the run at once
        done = (_train(t, p, ctx, data, factory, schedule, seed) for t in trainings)
    outcomes = iter(done)

    metrics: dict[str, dict] = {"acc": {}, "acc_weighted": {}, "lr": {}, "final_train_loss": {}}
    rows, selected = [], {}
    for name, key, plan, grid_runs in settings:
        runs, diverged = [], []
        for t in grid_runs:
            outcome = next(outcomes)
            psi0, failure = outcome.psi0, outcome.failure
            if ctx.clock is not None:  # a worker's resumed checkpoint: the run's compute includes it
                ctx.clock.resumed_from(outcome.before_s)
            if failure is not None:  # a method from outside went non-finite at this lr: the lr is dropped
                if len(grid_runs) == 1 or len(diverged) + 1 == len(grid_runs):
                    raise failure  # every lr of the grid diverged: the row fails
                diverged.append(t.lr)
                print(f"[fedrepro] {t.label}: diverged ({failure}); this lr is dropped from the grid", flush=True)
                continue
            runs.append((t.lr, outcome.history))
        if diverged:
            _put(metrics, "lr_dropped", name, key, float(len(diverged)))
        lr, hist = _pick(runs, p["select"])
        for lr_run, hist_run in runs:  # every grid point; `selected` marks the chosen lr's rows
            rows += [
                dict(
                    h,
                    method=name,
                    lr_grid=lr_run,
                    selected=lr_run == lr,
                    **({"epsilon": plan.epsilon} if plan else {}),
                )
                for h in hist_run
            ]
        last = hist[-1]
        selected.setdefault(name, {})[key] = (hist, psi0, plan.epsilon if plan else 0.0)
        for metric, value in (
            ("acc", 100.0 * last["test_acc"]),
            ("acc_weighted", 100.0 * last["test_acc_weighted"]),
            ("lr", lr),
            ("final_train_loss", last["train_loss"]),
        ):
            _put(metrics, metric, name, key, value)
        if "psi" in last:
            _put(metrics, "psi", name, key, last["psi"])
        if plan:
            _put(metrics, "noise", name, key, plan.record())
    metrics["n_clients"], metrics["clients_per_round"], metrics["rounds"] = m, K, rounds
    metrics["iters_per_epoch"], metrics["batch_size"] = iters, batch
    metrics["n_params"] = n_params(factory())
    checks = {}
    for check, names in p["checks"].items():
        if not set(names) <= set(selected):  # a method left out by only_methods: the check is not this run's
            continue
        results = [_check(check, n, selected[n], int(model_kw["n_classes"])) for n in names]  # chance: 1/outputs
        checks[check] = Check(all(ok for ok, _ in results), "; ".join(d for _, d in results))
    accountant = None
    if "noise" in metrics:
        first = next(iter(next(iter(metrics["noise"].values())).values()))
        accountant = {
            "name": "noise per method and epsilon in metrics.noise (noise_from thm5: Ozkara et al. Thm 5 + "
            "Lemma 1; rdp/pld: dp-accounting calibration); epsilon_library_rdp: dp-accounting RDP "
            "epsilon of the noise used",
            "version": _library_version(),
            "delta": first["delta"],
        }
    # a run that diverges (a DP baseline under heavy noise at quick scale) ends with no finite training loss in some
    # seeds; its accuracy is still defined, so the summary averages the loss over the seeds that have one (n says how
    # many) instead of stopping the workflow
    return RunOutput(
        metrics=metrics,
        history=pd.DataFrame(rows),
        checks=checks,
        accountant=accountant,
        undefined_ok=("final_train_loss.*", "lr_dropped.*"),
    )


@dataclass(frozen=True)
class _Training:
    """One training of a run: a method's algorithm with its options (an epsilon's noise mechanism among them) at one
    lr of its grid; ``label`` names it in the progress lines and its checkpoints."""

    algorithm: str
    options: dict
    lr: float
    label: str


def _schedule(p: dict, ds, device, seed: int) -> dict:
    """engine.train's schedule, the same for every training of the run."""
    median_train = float(np.median(ds.counts("train")))
    # "vary the batch size so that each epoch consists of 60 iterations" (Sec. 4): B = ceil(median n_i / iters)
    batch = max(1, int(np.ceil(median_train / p["iters_per_epoch"]))) if p["batch_size"] == "auto" else p["batch_size"]
    return dict(
        batch_size=batch,
        epochs=p["epochs"],
        tau=p["tau"],
        clients_per_round=max(1, round(p["sampling_rate"] * ds.n_clients)),
        lr_decay=p["lr_decay"],
        iters_per_epoch=p["iters_per_epoch"] or max(1, int(np.ceil(median_train / batch))),
        seed=seed,
        eval_every=p["eval_every"],
        device=device,
        vectorize=vectorize(p),
    )


@dataclass(frozen=True)
class _Outcome:
    """What one training gives the run: its history, or the Diverged error where a method from outside went
    non-finite at this lr; the algorithm's psi^0 (AdaPeD's; None for the others); and the compute of earlier attempts
    its checkpoint carried (RunClock.before_s, from a worker's copy of the run's clock too)."""

    history: list[dict] | None
    failure: Exception | None
    psi0: float | None
    before_s: float


def _train(t: _Training, p: dict, ctx: RunContext, data, factory, schedule: dict, seed: int) -> _Outcome:
    from fedrepro.learning.checkpoint import run_checkpointer
    from fedrepro.learning.engine import Diverged, train

    algo = build_algorithm(t.algorithm, t.options, p["weight_decay"])
    ckpt = run_checkpointer(ctx.checkpoint_dir, ctx.exp_id, p, seed, t.label, p["checkpoint_every"], ctx.clock)
    hist, failure = None, None
    try:
        hist = train(algo, data, factory, lr=t.lr, **schedule, callback=RoundProgress(t.label), checkpoint=ckpt)
    except Diverged as exc:
        failure = exc
    before = ctx.clock.before_s if ctx.clock is not None else 0.0
    return _Outcome(hist, failure, getattr(algo, "psi0", None), before)


def _in_processes(p: dict, ctx: RunContext, seed: int, device, trainings: list[_Training]) -> list | None:
    """The trainings' outcomes (as :func:`_train`'s), trained in parallel processes, one per training up to the
    job's threads, each from the run's inputs set up again in its process; None where they train here in turn
    (fedrepro.learning.setup.training_workers says when)."""
    from fedrepro.processes import map_in_processes

    outside = any(t.algorithm not in ALGORITHMS for t in trainings)
    workers = training_workers(p, device, len(trainings), outside)
    if workers < 2:
        return None
    print(f"[fedrepro] {ctx.exp_id}: {len(trainings)} trainings in {workers} processes", flush=True)
    return map_in_processes(_training_in_worker, [(p, ctx, seed, t) for t in trainings], workers)


def _training_in_worker(p: dict, ctx: RunContext, seed: int, t: _Training):
    ds, data, factory, _ = training_setup(p, ctx)
    return _train(t, p, ctx, data, factory, _schedule(p, ds, data.device, seed), seed)


def _put(metrics: dict, metric: str, method: str, key: str | None, value: Any) -> None:
    if key is None:
        metrics.setdefault(metric, {})[method] = value
    else:
        metrics.setdefault(metric, {}).setdefault(method, {})[key] = value


def _library_version() -> str:
    from fedrepro.privacy.result import library_version

    return f"dp-accounting {library_version('dp-accounting')}"
