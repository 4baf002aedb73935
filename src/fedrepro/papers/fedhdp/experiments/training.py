"""FedHDP's learning experiments (Aldaghri et al., Sec. 5, App. C; docs/notes/fedhdp.md E5-E8, Tables 3, 4, 8-11).

One run trains, on one partition with one initialization, every configured method on the shared engine:

    nonprivate   NON-PRIVATE (+Ditto): FedAvg, every client non-private, no clipping, no noise
                 (``clip_nonprivate: true``: Alg. 2 without noise, every update clipped to the adaptive clip, whose
                 count is not noised either)
    dp_fedavg    DP-FEDAVG (+Ditto): every client private, adaptive clipping, noise z_update (DPFedAvgAdaptive)
    hdp_fedavg   HDP-FEDAVG (+Ditto): private clients noised as in DP-FedAvg, opt-out clients not, r = 1
    fedhdp       FEDHDP: per-group DP means combined with ratio ``r``, Ditto with lambda_p = lambda_np

Ditto's lambda does not touch the global model, so each method trains one global model and one personal-model set
per lambda of ``lams`` in the same run (the paper's lambda blocks are separate stochastic runs; here the global
metrics repeat across lambda blocks). Metrics, per lambda block ``lam<lambda>`` (lambda printed as in the paper)
and method: ``acc_g`` (global model on the pooled server test set = the union of the clients' test splits),
``acc_g_p`` / ``acc_g_np`` (mean over private / non-private clients of the global model's accuracy on each client's
test split), ``acc_l_p`` / ``acc_l_np`` (the same with each client's personal model), ``d_g`` = acc_g_np - acc_g_p,
``d_l`` = acc_l_np - acc_l_p; accuracies in %, and ``<metric>_var`` the across-client variance in the paper's unit
100 x Var(accuracy in [0, 1]) = Var(accuracy in %) / 100 (docs/notes/fedhdp.md §7.19; population variance). NON-PRIVATE
has only
the np metrics (all clients are non-private), DP-FedAvg only the p ones (all private).

Privacy (docs/notes/fedhdp.md §3): Table 7's "effective noise multiplier" z_eff with the clipped-count noise std z_count
=
``count_std_per_client`` x K (TFF's 0.05 x clients per round) gives the update noise
z_update = (z_eff^-2 - (2 z_count)^-2)^-1/2 (fedrepro.learning.adaptive_clip); epsilon of the private group comes
from fedrepro.privacy (dp-accounting RDP) at z_eff, q = K/m, ``rounds`` releases, recorded as ``privacy.*``.
Non-private clients ("opt-out", 5 %): the partition's ``client_meta["opt_out"]`` when it has one (FedHDP's
non-IID MNIST schemes), else drawn once from the ``opt_out.seed`` stream ("picked randomly but fixed across all
experiments", Sec. 5), never from the run's seed.

Schedule: ``rounds`` rounds of K = round(q m) clients (fixed K, docs/notes/fedhdp.md §7.15); every sampled client runs
``local_epochs`` x ceil(median train count / batch_size) local SGD steps of fresh random minibatches (engine tau);
lr x ``lr_decay`` every ``lr_decay_every`` rounds (non-IID MNIST: 0.9 every 50, Table 7). eta_p = eta.

``differences`` (output key -> [a, b]): extra metrics a - b of two metric keys of this run, for the paper's numbers
that combine cells (Table 4's FMNIST FedHDP Delta_l mixes two lambda blocks; Sec. 5.2's "up to" gains). The run
also records its inputs under ``setting.*`` (clients, rate, rounds, Table 7's hyperparameters, the layer sizes of
the model actually built), which the registry compares with Tables 5-7.

Checks (``checks``: name -> methods): ``beats_chance`` (Acc_g and the first lambda's mean personal accuracy above
chance 100/C by 5 points), ``np_ge_p_global`` (Acc_g,np >= Acc_g,p: the opt-out clients are served at least as
well by the global model, Sec. 5.2), ``np_ge_p_local`` (the same for the personal models, first lambda),
``acc_g_ge_dp_fedavg`` (Acc_g at least the DP-FedAvg method's of the same run: the paper's headline, Sec. 5.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fedrepro.aggregate import flatten
from fedrepro.errors import ConfigError
from fedrepro.experiments import Check, RunContext, RunOutput, experiment_kind
from fedrepro.experiments.method_slot import MethodSlot
from fedrepro.experiments.only_methods import ONLY_METHODS, trained
from fedrepro.experiments.only_methods import validate as validate_only_methods
from fedrepro.experiments.params import DELTA, INT0, INT1, NONNEG, POSITIVE, UNIT
from fedrepro.learning.setup import SETUP_PROPERTIES, training_setup, vectorize
from fedrepro.papers.fedhdp.columns import client_metrics, lam_key, method_groups
from fedrepro.papers.fedhdp.test_readings import SCHEMA as TEST_READINGS
from fedrepro.papers.fedhdp.test_readings import local_accuracies

ALGORITHMS = ("nonprivate", "dp_fedavg", "hdp_fedavg", "fedhdp")
CHECKS = ("beats_chance", "np_ge_p_global", "np_ge_p_local", "acc_g_ge_dp_fedavg")

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": [
        "partition",
        "model",
        "methods",
        "lams",
        "rounds",
        "local_epochs",
        "batch_size",
        "lr",
        "sampling_rate",
        "clip",
        "privacy",
    ],
    "properties": {
        **SETUP_PROPERTIES,
        "methods": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "required": ["algorithm"],
                "properties": {
                    "algorithm": {"enum": list(ALGORITHMS)},
                    "r": NONNEG,
                    "clip_nonprivate": {"type": "boolean", "default": False},
                    # r = 0: whom the server samples (fedrepro.papers.fedhdp.fedhdp, R0_POPULATIONS)
                    "r0_population": {"enum": ["all", "nonprivate"], "default": "all"},
                },
            },
        },
        "lams": {"type": "array", "minItems": 1, "uniqueItems": True, "items": NONNEG},
        "rounds": INT1,
        "local_epochs": POSITIVE,
        "batch_size": INT1,
        "lr": POSITIVE,
        "lr_decay": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 1.0},
        "lr_decay_every": {"anyOf": [INT1, {"type": "null"}], "default": None},  # null: rounds (no decay step)
        "sampling_rate": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "clip": {
            "type": "object",
            "additionalProperties": False,
            "required": ["init"],
            "properties": {"init": POSITIVE, "quantile": {**UNIT, "default": 0.5}, "lr": {**NONNEG, "default": 0.2}},
        },
        "privacy": {
            "type": "object",
            "additionalProperties": False,
            "required": ["noise_multiplier_eff", "delta"],
            "properties": {
                "noise_multiplier_eff": NONNEG,
                "delta": DELTA,
                # the clipped count's noise std; null: count_std_per_client x K
                "count_std": {"anyOf": [NONNEG, {"type": "null"}], "default": None},
                "count_std_per_client": {**NONNEG, "default": 0.05},
                "accountant": {"enum": ["rdp", "pld"], "default": "rdp"},
            },
        },
        "opt_out": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"fraction": {**UNIT, "default": 0.05}, "seed": {**INT0, "default": 0}},
            "default": {},
        },
        "checks": {
            "type": "object",
            "propertyNames": {"enum": list(CHECKS)},
            "additionalProperties": {"type": "array", "minItems": 1, "items": {"type": "string"}},
            "default": {},
        },
        "differences": {
            "type": "object",
            "additionalProperties": {"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "string"}},
            "default": {},
        },
        "weight_decay": {**NONNEG, "default": 0.0},
        "eval_every": {"anyOf": [INT1, {"type": "null"}], "default": None},  # null: rounds (the last round only)
        # evaluate the final global models a training run with the same parameters kept (arrays.npz) under another
        # reading of the local test sets, instead of training (fedrepro.papers.fedhdp.test_readings); no default:
        # absent, the run trains (and runs made before this option keep their parameter digest)
        "reevaluate": TEST_READINGS,
        # keep the personal models' accuracies under the digit readings of the local test sets (test_readings.
        # local_accuracies: every client's personal models on all its digit's test images); no default: absent, they
        # are kept (and runs made before this option keep their parameter digest); false in the quick wiring checks
        "local_readings": {"type": "boolean"},
        # train only these methods (names of ``methods``): one method's rerun, a forensic reading of a few methods,
        # or a table split into jobs; checks and differences that name another method are left out (null: all).
        # A DP-FedAvg method alone trains by its own class: its columns read off a clipped HDP-FedAvg's training in a
        # run of both (shared_trainings) equal it to float32 summation order
        "only_methods": {**ONLY_METHODS, "type": ["array", "null"], "default": None},
    },
}


def _validate(p: dict, ctx: RunContext) -> None:
    if p["partition"] not in ctx.partitions:
        raise ConfigError(
            f"{ctx.exp_id}: params.partition={p['partition']!r} must be listed in the experiment's "
            f"partitions ({sorted(ctx.partitions)})"
        )
    for name, spec in p["methods"].items():
        if spec["algorithm"] == "fedhdp" and "r" not in spec:
            raise ConfigError(f"{ctx.exp_id}: params.methods.{name}: algorithm fedhdp needs r")
        if spec["algorithm"] != "fedhdp" and "r" in spec:
            raise ConfigError(f"{ctx.exp_id}: params.methods.{name}.r: only fedhdp takes a ratio (HDP-FedAvg is r=1)")
        if spec["r0_population"] != "all" and spec.get("r") != 0:
            raise ConfigError(
                f"{ctx.exp_id}: params.methods.{name}.r0_population: only a fedhdp method with r: 0 samples from a "
                "population of its own; remove the key or set r: 0"
            )
    for check, names in p["checks"].items():
        unknown = sorted(set(names) - set(p["methods"]))
        if unknown:
            raise ConfigError(f"{ctx.exp_id}: params.checks.{check}: unknown methods {unknown}")
    validate_only_methods(p, ctx.exp_id)


def opt_out_mask(ds, fraction: float, seed: int) -> tuple[np.ndarray, str]:
    """The non-private clients: the partition's ``opt_out`` flags, else round(fraction m) clients drawn once."""
    from fedrepro.seeding import rng_for

    try:
        flags = np.asarray(ds.client_meta("opt_out"), dtype=bool)
        return flags, "partition client_meta['opt_out']"
    except (KeyError, ValueError):
        pass
    m = ds.n_clients
    out = np.zeros(m, dtype=bool)
    out[rng_for("fedhdp.opt_out", seed).choice(m, int(round(fraction * m)), replace=False)] = True
    return out, f"drawn: {out.sum()} of {m} clients (opt_out.seed {seed})"


def build(spec: dict, private: np.ndarray, lams: list[float], z_update: float, clip: dict, wd: float):
    """The engine algorithm of one method spec (classes from the one algorithm registry, by Algorithm.name)."""
    from fedrepro.learning.algorithms import build_algorithm

    alg, common = spec["algorithm"], dict(clip=clip, lams=lams, weight_decay=wd)
    if alg not in ALGORITHMS:  # a method from outside the package (fedrepro.compare): trained without privacy
        return build_algorithm(alg, weight_decay=wd)
    if alg == "nonprivate":  # FedAvg + Ditto: FedHDP with every client non-private (clipped: Alg. 2 without noise)
        if spec["clip_nonprivate"]:  # (the unclipped default keeps its clip, which no client reads, as it was)
            common["clip"] = {**clip, "count_std": 0.0}
        return build_algorithm(
            "fedhdp", private=np.zeros_like(private), r=1.0, clip_nonprivate=spec["clip_nonprivate"], **common
        )
    if alg == "dp_fedavg":
        return build_algorithm("dp_fedavg_adaptive", noise_multiplier=z_update, **common)
    kw = dict(private=private, noise_multiplier=z_update, clip_nonprivate=spec["clip_nonprivate"], **common)
    if alg == "hdp_fedavg":
        return build_algorithm("hdp_fedavg", **kw)
    return build_algorithm("fedhdp", r=spec["r"], r0_population=spec["r0_population"], **kw)


@dataclass(frozen=True)
class Noise:
    """The private group's noise (docs/notes/fedhdp.md §3): Table 7's effective multiplier, the clipped-count noise, the
    update
    noise they imply, the adaptive-clipping settings, and epsilon from dp-accounting at z_eff (None without noise)."""

    z_eff: float
    z_count: float
    z_update: float
    clip: dict
    sampling_rate: float
    epsilon: Any


def schedule_of(p: dict, ds, seed: int, device) -> tuple[dict, int, int]:
    """The engine schedule: ``rounds`` rounds of K = round(q m) clients, ``local_epochs`` x ceil(median train count /
    batch_size) local steps, lr x decay every ``lr_decay_every`` rounds (the engine decays per "epoch" of
    iters_per_epoch iterations). Returns (schedule, K, local iterations per epoch)."""
    K = max(1, round(p["sampling_rate"] * ds.n_clients))
    iters = max(1, int(np.ceil(float(np.median(ds.counts("train"))) / p["batch_size"])))
    tau = max(1, int(round(p["local_epochs"] * iters)))
    schedule = dict(
        batch_size=p["batch_size"],
        rounds=p["rounds"],
        tau=tau,
        clients_per_round=K,
        lr=p["lr"],
        lr_decay=p["lr_decay"],
        iters_per_epoch=tau * (p["lr_decay_every"] or p["rounds"]),
        seed=seed,
        eval_every=p["eval_every"] or p["rounds"],
        device=device,
        vectorize=vectorize(p),
    )
    return schedule, K, iters


def noise_of(p: dict, K: int, m: int, exp_id: str) -> Noise:
    from fedrepro.learning.adaptive_clip import update_noise_multiplier
    from fedrepro.privacy import compute_epsilon

    priv = p["privacy"]
    z_eff = priv["noise_multiplier_eff"]
    z_count = priv["count_std"] if priv["count_std"] is not None else priv["count_std_per_client"] * K
    try:
        z_update = update_noise_multiplier(z_eff, z_count)
    except ValueError as exc:
        raise ConfigError(f"{exp_id}: params.privacy: {exc}") from None
    clip = {**p["clip"], "count_std": z_count if z_eff > 0 else 0.0}
    q = K / m
    eps = compute_epsilon(z_eff, q, p["rounds"], priv["delta"], priv["accountant"]) if z_eff > 0 else None
    return Noise(z_eff, z_count, z_update, clip, q, eps)


@dataclass(frozen=True)
class Trained:
    """One method's training: its client metrics per lambda block, history rows, final global model (a paper method's,
    as ``<method>.<parameter>`` arrays), final clip and skipped rounds (None where the method has none), and the
    compute of earlier attempts its checkpoints carried (the run's clock resumes from it)."""

    per_lam: list[dict]
    rows: list[dict]
    finals: dict[str, np.ndarray]
    final_clip: float | None
    skipped: int | None
    before_s: float = 0.0


def train_methods(
    p: dict, ctx: RunContext, data, factory, schedule: dict, private: np.ndarray, noise: Noise, counts: np.ndarray
) -> tuple[dict, dict, list[dict], dict[str, np.ndarray]]:
    """Train every method; returns (metrics per lambda block and method, Table 3/4 metrics per method and lambda,
    history rows, each paper method's final global model as ``<method>.<parameter>`` arrays: 39,760 floats per
    method for the MNIST MLP, kept so that the global columns can be evaluated again under another reading of the
    test sets without training). A method whose training is another's (:func:`shared_trainings`) is not trained
    again. With the job's threads to spare the methods train in parallel processes (:func:`_in_processes`); each
    trains alike alone or beside the others, and the results are taken in ``methods``' order."""
    methods, shared = trained(p), shared_trainings(p)
    own = [name for name in methods if name not in shared]
    done = _in_processes(p, ctx, schedule["seed"], data.device, own) or {
        k: t
        for name in own
        for k, t in train_method(name, methods[name], p, ctx, data, factory, schedule, private, noise, counts).items()
    }
    lams = list(p["lams"])
    metrics: dict[str, Any] = {lam_key(lam): {} for lam in lams}
    rows, per_method, finals = [], {}, {}
    for name in methods:
        t = done[name]
        rows += t.rows
        finals |= t.finals
        for lam, vals in zip(lams, t.per_lam):
            metrics[lam_key(lam)][name] = vals
        per_method[name] = t.per_lam
        if t.final_clip is not None:
            metrics.setdefault("final_clip", {})[name] = t.final_clip
        if t.skipped is not None:
            metrics.setdefault("skipped_rounds", {})[name] = t.skipped
        if ctx.clock is not None:
            ctx.clock.resumed_from(t.before_s)
    return metrics, per_method, rows, finals


def shared_trainings(p: dict) -> dict[str, str]:
    """{method: the method whose training it is} among the methods this run trains. A DP-FedAvg method is the
    training of an HDP-FedAvg method that clips every update (``clip_nonprivate``, Alg. 2's reading): FedHDP at
    r = 1 then makes DP-FedAvg's update in exact arithmetic (the private group's noise z S / N_p weighted by N_p / K
    is z S / K; docs/notes/fedhdp.md §7.4) from the same minibatches, noise draws and clip bits, and the same Ditto
    steps (one lambda for both groups). So the run trains HDP-FedAvg once and reads DP-FedAvg's columns (every
    client private) off its models: a non-IID MNIST seed trains 7 methods, not 8, over its two processes. It holds
    only where every round sampled a private client (else that round had no noise); :func:`train_method` counts
    those rounds and trains the DP-FedAvg method itself where there was one. The derived rows equal DP-FedAvg
    trained alone (its own class, ``only_methods``) up to float32 summation order (tests)."""
    methods = trained(p)
    source = next((n for n, s in methods.items() if s["algorithm"] == "hdp_fedavg" and s.get("clip_nonprivate")), None)
    return {} if source is None else {n: source for n, s in methods.items() if s["algorithm"] == "dp_fedavg"}


def train_method(
    name: str,
    spec: dict,
    p: dict,
    ctx: RunContext,
    data,
    factory,
    schedule: dict,
    private: np.ndarray,
    noise: Noise,
    counts: np.ndarray,
) -> dict[str, Trained]:
    """Train one method (from its round checkpoint, when one is kept) and measure it: {name: its Trained}, and the
    same for each method whose training it is (:func:`shared_trainings`)."""
    from fedrepro.learning.checkpoint import run_checkpointer
    from fedrepro.learning.engine import evaluate, replaying, train
    from fedrepro.progress import RoundProgress

    lams, m = list(p["lams"]), len(private)
    algo = build(spec, private, lams, noise.z_update, noise.clip, p["weight_decay"])
    ckpt = run_checkpointer(ctx.checkpoint_dir, ctx.exp_id, p, schedule["seed"], name, p["checkpoint_every"], ctx.clock)
    before = (lambda: ctx.clock.before_s) if ctx.clock is not None else (lambda: 0.0)
    if spec["algorithm"] not in ALGORITHMS:  # a method from outside: its deployed models in every role
        last: dict = {}
        release = method_release(algo, private, noise, data.device)
        hist = train(
            algo,
            data,
            factory,
            **schedule,
            callback=RoundProgress(name),
            checkpoint=ckpt,
            evaluated=last.update,
            release=release,
        )
        # by construction: the protocol's private and opt-out clients; else every client non-private, as
        # NON-PRIVATE, its np columns over all clients
        groups = (private, ("p", "np")) if release is not None else (np.zeros(m, bool), ("np",))
        per_lam = client_metrics(last["acc"], [last["acc"]] * len(lams), counts, *groups)
        clip = float(release.norm) if release is not None else None
        return {name: Trained(per_lam, [dict(h, method=name) for h in hist], {}, clip, None, before())}
    hist = train(algo, data, factory, **schedule, callback=RoundProgress(name), checkpoint=ckpt)
    models = algo.final_models()
    acc_g = evaluate(algo.state.net, models["global"], data, "test")["acc"]
    acc_l = [evaluate(algo.state.net, v, data, "test")["acc"] for v in models["personal"]]
    # the personal models' accuracies under the other test-set readings, kept (the models are not); not in a replay
    keep_local = p.get("local_readings") is not False and not replaying()
    local = local_accuracies(algo.state.net, models["personal"], data.ds, data, name) if keep_local else {}
    skipped = int(getattr(algo.state, "skipped", 0))

    def read_as(method: str) -> Trained:
        """This training's columns as ``method``'s: its own, or those of a method whose training this is."""
        finals = {f"{method}.{k}": v[0].detach().cpu().numpy() for k, v in models["global"].items()}
        finals |= {k.removesuffix(name) + method: v for k, v in local.items()}
        per_lam = client_metrics(acc_g, acc_l, counts, *method_groups(p["methods"][method], private))
        rows = [dict(h, method=method) for h in hist]
        return Trained(per_lam, rows, finals, float(algo.state.clip), skipped, before())

    out = {name: read_as(name)}
    for other in [n for n, source in shared_trainings(p).items() if source == name]:
        if algo.state.no_private:  # HDP-FedAvg drew no noise in such a round, DP-FedAvg would have
            print(f"[fedrepro] {other} trained itself: {algo.state.no_private} rounds of {name} had no private client")
            out |= train_method(other, p["methods"][other], p, ctx, data, factory, schedule, private, noise, counts)
        else:
            out[other] = read_as(other)
    return out


def _in_processes(p: dict, ctx: RunContext, seed: int, device, names: list[str]) -> dict[str, Trained] | None:
    """The methods trained in parallel processes, one per method up to the job's threads (fedrepro.processes), each
    from the run's inputs set up again in its process; None where they train here in turn (one thread or one method,
    and what fedrepro.learning.setup.training_workers says). Each worker's copy of the run's clock measures from the
    run's start (perf_counter is the system's monotonic clock), so its checkpoints carry the run's compute."""
    from fedrepro.learning.setup import training_workers
    from fedrepro.processes import map_in_processes

    outside = any(p["methods"][n]["algorithm"] not in ALGORITHMS for n in names)
    workers = training_workers(p, device, len(names), outside)
    if workers < 2:
        return None
    print(f"[fedrepro] {ctx.exp_id}: {len(names)} methods in {workers} processes", flush=True)
    # the shortest last, so that no long method starts alone at the end: FedHDP at r = 0 (its clients drawn from
    # all) personalizes only the opt-out ones and takes about half a method's time on non-IID MNIST
    order = sorted(names, key=lambda n: personalizes_opt_out_only(p["methods"][n]))
    done = map_in_processes(_method_in_worker, [(p, ctx, seed, n) for n in order], workers)
    return {k: t for part in done for k, t in part.items()}


def personalizes_opt_out_only(spec: dict) -> bool:
    """Whether a method is FedHDP at r = 0 with its clients drawn from all: only the opt-out ones personalize, so its
    personal sets step for a few clients, one set at a time."""
    return spec["algorithm"] == "fedhdp" and spec.get("r") == 0 and spec.get("r0_population", "all") == "all"


def _method_in_worker(p: dict, ctx: RunContext, seed: int, name: str) -> dict[str, Trained]:
    ds, data, factory, _, opt_out = _setup(p, ctx)
    schedule, K, _ = schedule_of(p, ds, seed, data.device)
    noise = noise_of(p, K, ds.n_clients, ctx.exp_id)
    counts = ds.counts("test").astype(np.float64)
    return train_method(name, p["methods"][name], p, ctx, data, factory, schedule, ~opt_out, noise, counts)


def _setup(p: dict, ctx: RunContext):
    """training_setup's (ds, data, factory, model_kw) and the non-private clients' mask."""
    ds, data, factory, model_kw = training_setup(p, ctx)
    opt_out, _ = opt_out_mask(ds, p["opt_out"]["fraction"], p["opt_out"]["seed"])
    return ds, data, factory, model_kw, opt_out


def method_release(algo, private: np.ndarray, noise: Noise, device):
    """The protocol's release of a method from outside that sends client messages (Algorithm.client_message):
    HDP-FedAvg's server step (the private clients' messages clipped to the adaptive norm, their mean noised as the
    paper's private rows are, the opt-out clients' as they are), so its private clients spend the rows' epsilon;
    None for a method that sends none (it is trained without privacy, as NON-PRIVATE)."""
    import torch

    from fedrepro.learning.adaptive_clip import AdaptiveClip
    from fedrepro.learning.engine import sends_messages
    from fedrepro.papers.fedhdp.hdp_fedavg import HDPFedAvgRelease

    if not sends_messages(algo):
        return None
    clip = AdaptiveClip.parse(noise.clip)
    return HDPFedAvgRelease(torch.from_numpy(private).to(device), noise.z_update, clip, clip.init)


def setting_of(p: dict, model, feature_shape, m: int, K: int, n_opt_out: int, n_classes: int, noise: Noise) -> dict:
    """The run's inputs as Tables 5-7 print them (the registry compares them)."""
    from torch import nn

    return {
        "n_clients": m,
        "clients_per_round_pct": 100.0 * K / m,
        "nonprivate_pct": 100.0 * n_opt_out / m,
        "rounds": p["rounds"],
        "n_labels": n_classes,
        "batch_size": p["batch_size"],
        "local_epochs": p["local_epochs"],
        "lr": p["lr"],
        "lr_decay": p["lr_decay"],
        "clip_init": noise.clip["init"],
        "clip_lr": noise.clip["lr"],
        "target_unclipped_quantile": noise.clip["quantile"],
        "effective_noise_multiplier": noise.z_eff,
        "model": layer_sizes(model, feature_shape),
        "model_is_cnn": float(any(isinstance(mod, nn.Conv2d) for mod in model.modules())),
    }


def add_differences(metrics: dict, differences: dict, exp_id: str, partial: bool = False) -> None:
    """``differences`` (output key -> [a, b]): metrics a - b of two metric keys of this run, in place; ``partial``
    (a run of some methods only): a difference of a method not trained is left out."""
    for out_key, (a, b) in differences.items():
        flat = flatten(metrics)
        if partial and (a not in flat or b not in flat):
            continue
        if a not in flat or b not in flat:
            raise ConfigError(
                f"{exp_id}: params.differences.{out_key}: {a if a not in flat else b!r} is not a metric of this run"
            )
        node = metrics
        *head, last = out_key.split(".")
        for part in head:
            node = node.setdefault(part, {})
        node[last] = flat[a] - flat[b]


def checks_of(p: dict, per_method: dict, n_classes: int, exp_id: str) -> dict[str, Check]:
    """The configured checks over the trained methods (a check naming only methods this run did not train, or
    comparing with a DP-FedAvg method it did not train, is left out)."""
    checks = {}
    dp_names = [n for n, spec in p["methods"].items() if spec["algorithm"] == "dp_fedavg"]
    for check, names in p["checks"].items():
        names = [n for n in names if n in per_method]
        if not names or (check == "acc_g_ge_dp_fedavg" and not set(dp_names) & set(per_method)):
            continue
        if check == "acc_g_ge_dp_fedavg":
            if len(dp_names) != 1:
                raise ConfigError(f"{exp_id}: params.checks.{check} needs exactly one dp_fedavg method")
            ref = per_method[dp_names[0]][0]["acc_g"]
            results = [
                (
                    per_method[n][0]["acc_g"] >= ref,
                    f"{n}: Acc_g {per_method[n][0]['acc_g']:.2f} vs {dp_names[0]} {ref:.2f}",
                )
                for n in names
            ]
        else:
            results = [_check(check, n, per_method[n][0], n_classes) for n in names]
        checks[check] = Check(all(ok for ok, _ in results), "; ".join(d for _, d in results))
    return checks


# ------------------------------------------------------------------------------------------------ method slot

GROUP_METRICS = ("acc_g_p", "acc_g_np")  # the global model per client group (a method's own notion of private)
PERSONAL_METRICS = ("acc_l_p", "acc_l_np")  # the personal models, per lambda block


def _only(p: dict, name: str, private: bool) -> dict:
    """``p`` with the method ``name`` alone under the protocol's partition, model, rounds, K, local steps, lr and decay,
    evaluation and privacy: a method that sends client messages is trained by construction (the protocol releases its
    messages as HDP-FedAvg's server step, :func:`method_release`), one that sends none without privacy, as the
    NON-PRIVATE row (:func:`train_methods` decides by the method's class)."""
    drop = ("checks", "differences", "only_methods")
    return {k: v for k, v in p.items() if k not in drop} | {"methods": {name: {"algorithm": name}}}


def _with_lr(p: dict, name: str, grid: list[float]) -> dict:
    """The method's run at its own lr: FedHDP's protocol trains every row at one lr (Table 7) and has no rule to pick
    among several, so a grid is refused."""
    if len(grid) != 1:
        raise ConfigError(
            f"--lr {' '.join(f'{x:g}' for x in grid)}: FedHDP's protocol trains at one lr (Table 7: {p['lr']:g}) and "
            "has no rule to select among several; give one --lr"
        )
    return p | {"lr": grid[0]}


def _cells(metrics: dict, name: str) -> dict[str, float]:
    """Acc_g (pooled), Acc_g,p / Acc_g,np, and Acc_l,p / Acc_l,np per lambda block, of the groups the method has, and
    ε: the run's epsilon for a row with private clients (the private group's guarantee), inf for one without (no
    guarantee: NON-PRIVATE, a method from outside trained without privacy). A method from outside has one deployed
    model per client: it fills Acc_g, the group columns and every lambda's personal columns."""
    blocks = [k for k in metrics if k.startswith("lam") and isinstance(metrics[k], dict) and name in metrics[k]]
    out: dict[str, float] = {}
    for i, block in enumerate(blocks):
        vals = metrics[block][name]
        keys = [("acc_g", "acc_g"), *((m, m) for m in GROUP_METRICS)] if i == 0 else []
        keys += [(m, f"{block} {m}") for m in PERSONAL_METRICS]
        out |= {col: float(vals[m]) for m, col in keys if m in vals}
    eps = metrics.get("privacy", {}).get("epsilon")
    if out and eps is not None:
        out["ε"] = float(eps) if "acc_g_p" in out else math.inf
    return out


def _paired(p: dict, baseline: str, constructed: bool) -> list[str] | None:
    """The group columns pair where both rows' groups are the same clients: a method from outside trained by
    construction has the protocol's private and opt-out clients, as HDP-FedAvg and FedHDP; one trained without
    privacy counts every client non-private, as NON-PRIVATE. With the other rows only Acc_g compares."""
    same = ("hdp_fedavg", "fedhdp") if constructed else ("nonprivate",)
    return None if p["methods"][baseline]["algorithm"] in same else ["acc_g"]


def _curves(history: pd.DataFrame, name: str) -> pd.DataFrame:
    """Mean test accuracy (%) over clients of the deployed models vs round."""
    h = history[history["method"] == name]
    return pd.DataFrame({"x": h["round"], "y": 100 * h["test_acc"], "series": ""})


def _privacy_note(cls) -> str:
    from fedrepro.learning.engine import sends_messages

    if sends_messages(cls):
        return (
            "privacy by construction: your method sends client_message and the protocol releases it as HDP-FedAvg's "
            "server step (each private client's message clipped to the adaptive norm S, the private group's mean "
            "noised with the paper's z and S, the opt-out clients' messages as they are, weights per client; S moved "
            "by the noisy count), and server_update sees only that release: its private clients spend the ε of the "
            "paper's private rows"
        )
    return (
        "trained without privacy: your method implements no client_message, so FedHDP's protocol has nothing to "
        "release and trains it as the NON-PRIVATE row (every client non-private, ε ∞); implement client_message and "
        "server_update to run it under the private protocol"
    )


METHOD_SLOT = MethodSlot(
    only=_only,
    private=lambda p: p["privacy"]["noise_multiplier_eff"] > 0,
    methods=lambda p: list(trained(p)),
    cells=_cells,
    curves=_curves,
    x_label="round",
    y_label="test accuracy (%), mean over clients",
    what=(
        "accuracy (%): acc_g of the global model on the pooled test sets, acc_g_p / acc_g_np its mean over the "
        "method's private / non-private clients, lam<lambda> acc_l_p / acc_l_np the same of the Ditto personal models "
        "(a method from outside: its deployed models in every column, over the protocol's private and opt-out "
        "clients when trained by construction, else every client non-private, as NON-PRIVATE), and ε the epsilon "
        "of the row's private clients at the protocol's δ (dp-accounting, the run's accountant; —: no private "
        "client, no guarantee, inf in compare.json)"
    ),
    private_text="",
    privacy_note=_privacy_note,
    releases_messages=True,
    paired=_paired,
    paired_text=(
        "the group columns are paired where both rows' groups are the same clients (by construction: HDP-FedAvg and "
        "FedHDP, over the private and opt-out clients; without privacy: NON-PRIVATE, every client non-private); with "
        "the other rows only acc_g; ε never"
    ),
    with_lr=_with_lr,
    lr_text="your one lr in place of the protocol's (Table 7's; FedHDP's protocol has no rule to select among several)",
)


@experiment_kind(
    "fedhdp_training",
    SCHEMA,
    metrics=(
        "lam*.*",
        "final_clip.*",
        "skipped_rounds.*",
        "privacy.*",
        "setting.*",
        "derived.*",
        "table*.*",
        "n_clients",
        "n_opt_out",
        "clients_per_round",
        "local_steps",
        "iters_per_epoch",
        "n_params",
    ),
    checks=("beats_chance", "np_ge_p_global", "np_ge_p_local", "acc_g_ge_dp_fedavg"),
    method_slot=METHOD_SLOT,
)
def fedhdp_training(p: dict, rng: np.random.Generator, ctx: RunContext) -> RunOutput:
    from fedrepro.learning.models import n_params

    _validate(p, ctx)
    ds, data, factory, model_kw, opt_out = _setup(p, ctx)
    m = ds.n_clients
    if p.get("reevaluate") is not None:  # the kept final models under another test-set reading: no training
        from fedrepro.papers.fedhdp.test_readings import reevaluate

        metrics, checks = reevaluate(p, ctx, ~opt_out, ds, data, factory)
        return RunOutput(metrics=metrics, checks=checks)
    schedule, K, iters = schedule_of(p, ds, int(rng.integers(2**31)), data.device)
    noise = noise_of(p, K, m, ctx.exp_id)
    metrics, per_method, rows, finals = train_methods(
        p, ctx, data, factory, schedule, ~opt_out, noise, ds.counts("test").astype(np.float64)
    )
    n_classes = int(model_kw["n_classes"])
    metrics["privacy"] = {
        "noise_multiplier_eff": noise.z_eff,
        "noise_multiplier_update": noise.z_update,
        "count_std": noise.z_count,
        "sampling_rate": noise.sampling_rate,
        "rounds": p["rounds"],
        "delta": p["privacy"]["delta"],
        **({"epsilon": noise.epsilon.epsilon} if noise.epsilon else {}),
    }
    model = factory()  # one instance for what the settings read off the model
    metrics.update(
        n_clients=m,
        n_opt_out=int(opt_out.sum()),
        clients_per_round=K,
        local_steps=schedule["tau"],
        iters_per_epoch=iters,
        n_params=n_params(model),
    )
    metrics["setting"] = setting_of(p, model, data.feature_shape, m, K, int(opt_out.sum()), n_classes, noise)
    add_differences(metrics, p["differences"], ctx.exp_id, partial=p["only_methods"] is not None)
    accountant = None
    if noise.epsilon is not None:
        eps = noise.epsilon
        accountant = {
            "name": f"{eps.accountant} (z_eff {noise.z_eff}, q {noise.sampling_rate:.4g}, {p['rounds']} "
            "rounds; private group)",
            "version": f"{eps.library} {eps.library_version}",
            "delta": p["privacy"]["delta"],
        }
    return RunOutput(
        metrics=metrics,
        history=pd.DataFrame(rows),
        checks=checks_of(p, per_method, n_classes, ctx.exp_id),
        accountant=accountant,
        arrays=finals,
    )


def layer_sizes(model, feature_shape=(1, 28, 28)) -> dict[str, int]:
    """The sizes of Table 6's rows (elements of each layer's output), read off the built model by a forward pass:
    FC NN layer1..4 (input 28x28 = 784, flatten 784, 50, 10); CNN layer1..10 (784, 28x28x16, 14x14x16, 14x14x32,
    7x7x32, dropout (left out: same size), flatten 1568, 128, dropout, 62)."""
    import torch
    from torch.nn import functional as F

    from fedrepro.learning.models import MLP
    from fedrepro.papers.fedhdp.cnn import FedHDPCNN

    x = torch.zeros(1, *feature_shape)
    with torch.no_grad():
        if isinstance(model, MLP) and len(model.hidden) == 1:
            h = F.relu(model.hidden[0](x.flatten(1)))
            return {
                "layer1": x.numel(),
                "layer2": x.flatten(1).shape[1],
                "layer3": h.shape[1],
                "layer4": model.out(h).shape[1],
            }
        if isinstance(model, FedHDPCNN):
            c1 = F.relu(model.conv1(x))
            p1 = F.max_pool2d(c1, 2)
            c2 = F.relu(model.conv2(p1))
            p2 = F.max_pool2d(c2, 2)
            d = F.relu(model.fc1(p2.flatten(1)))
            sizes = [x, c1, p1, c2, p2, p2, p2.flatten(1), d, d, model.fc2(d)]
            return {f"layer{i}": t[0].numel() for i, t in enumerate(sizes, 1)}
    return {}


def _check(name: str, method: str, m: dict, n_classes: int) -> tuple[bool, str]:
    if name == "beats_chance":
        chance = 100.0 / n_classes
        local = [m[k] for k in ("acc_l_p", "acc_l_np") if k in m]
        ok = m["acc_g"] > chance + 5 and all(a > chance + 5 for a in local)
        return (
            ok,
            f"{method}: Acc_g {m['acc_g']:.1f}, Acc_l {', '.join(f'{a:.1f}' for a in local)} vs chance {chance:.1f}",
        )
    kind = "g" if name == "np_ge_p_global" else "l"
    if f"acc_{kind}_p" not in m or f"acc_{kind}_np" not in m:
        raise ConfigError(f"params.checks.{name}: method {method} has no private/non-private split")
    a_np, a_p = m[f"acc_{kind}_np"], m[f"acc_{kind}_p"]
    return a_np >= a_p, f"{method}: Acc_{kind},np {a_np:.2f} vs Acc_{kind},p {a_p:.2f}"
