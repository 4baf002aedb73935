"""FedHDP's global-model columns evaluated again under another reading of the clients' local test sets, from the
final global models a paper-scale run kept (``arrays.npz``), without training (issue: FedHDP's MNIST tables settled).

The paper does not describe the MNIST clients' local test data. The partition's reading (``partition``) deals each
digit's MNIST test images out to the clients of that digit, disjointly: 4-6 images per client at 2,000 clients.
Table 9's variances of global-model accuracy over non-private clients that all hold digit 7 and share one model are
binomial noise alone, p(1 - p)/n with n ~ 117-255 (median ~195) images per client, which 4-6 cannot give; App. C
calls the server's test set "the test MNIST dataset" for non-IID MNIST. Readings here (``reevaluate.test_reading``):

    partition       the partition's own test split (the trained run's numbers, to float rounding: a check)
    digit_sample    ``per_client`` images drawn, without replacement within a client, from MNIST's test images of
                    the client's digit (clients of one digit overlap: 200 clients x 195 images exceed the ~1,000 of
                    a digit, so the paper's sets, if this is the reading, overlapped), seed ``sample_seed`` per client
    digit_all       every MNIST test image of the client's digit (all clients of a digit share one set)

The global model's columns (Acc_g on the whole MNIST test set, Acc_g,p / Acc_g,np, their across-client variances,
Δ_g) are evaluated from the kept final global models, in every λ block as the trained run reports them. The personal
models are not kept (2,000 clients x 3 λ x 39,760 floats per method): a run evaluates them itself under the digit
readings as it ends (:func:`local_accuracies`, kept as ``local_acc.<reading>.<method>``: per λ and client), and the
personal columns (Acc_l,p / Acc_l,np, their variances, Δ_l) are re-evaluated from those where the run has them
(undefined where it has none); under the partition's reading they are the trained run's own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from fedrepro.errors import ConfigError, ResultError
from fedrepro.experiments import Check
from fedrepro.papers.fedhdp.columns import client_metrics, lam_key, method_groups
from fedrepro.runio import ARRAYS, read_metrics
from fedrepro.staleness import find_run

READINGS = ("partition", "digit_sample", "digit_all")
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["test_reading"],
    "properties": {
        "test_reading": {"enum": list(READINGS)},
        "per_client": {"type": "integer", "minimum": 1, "default": 195},
        "sample_seed": {"type": "integer", "minimum": 0, "default": 0},
    },
}
GLOBAL_KEYS = ("acc_g", "acc_g_p", "acc_g_np", "acc_g_p_var", "acc_g_np_var", "d_g")
LOCAL_KEYS = ("acc_l_p", "acc_l_np", "acc_l_p_var", "acc_l_np_var", "d_l")
# the readings a training run evaluates its personal models under (the defaults of the schema above)
LOCAL_READINGS = ({"test_reading": "digit_sample", "per_client": 195, "sample_seed": 0}, {"test_reading": "digit_all"})


def local_key(reading: Mapping, method: str) -> str:
    """The arrays.npz key of a method's personal-model accuracies (λ x client) under a reading: the reading's
    name, with its size and seed where they are not the defaults of LOCAL_READINGS."""
    name, kept = reading["test_reading"], LOCAL_READINGS[0]
    if name == "digit_sample" and any(reading.get(k, kept[k]) != kept[k] for k in ("per_client", "sample_seed")):
        name += f"_{reading['per_client']}_{reading['sample_seed']}"
    return f"local_acc.{name}.{method}"


def local_accuracies(net, personal: list, ds, data, method: str, chunk_clients: int = 32) -> dict[str, np.ndarray]:
    """Each client's personal model (one per λ in ``personal``, stacked over clients) on its test set under each of
    LOCAL_READINGS, as ``{local_key: (λ, client) accuracies in [0, 1]}``; {} for a partition without per-client
    digits. The clients of a digit, ``chunk_clients`` at a time, are evaluated on all the digit's test images at once,
    and each reading's sets (all subsets of them) read from those hits."""
    import torch

    try:
        digit = ds.client_meta("digit").astype(int)
    except (KeyError, ValueError):
        return {}
    o = ds.offsets("test")
    test_rows = np.arange(o[0], o[-1])
    sets = []
    for r in LOCAL_READINGS:
        try:
            sets.append(_per_client_sets(ds, r)[0])
        except ConfigError:  # a digit with fewer test images than a client's sample (a reduced partition): none
            return {}
    out = np.full((len(LOCAL_READINGS), len(personal), ds.n_clients), np.nan)

    def hits(p, x, y):
        return (net.logits(p, x).argmax(-1) == y).to(torch.float32)

    for d in np.unique(digit):
        clients = np.flatnonzero(digit == d)
        rows = test_rows[ds.labels[test_rows] == d]
        where = np.full(len(ds.labels), -1)
        where[rows] = np.arange(len(rows))
        x, y = data.gather(rows)
        for chunk in np.array_split(clients, -(-len(clients) // chunk_clients)):  # a chunk's copies of the images
            idx = torch.from_numpy(chunk).to(data.device)
            xs, ys = x.expand(len(chunk), *x.shape), y.expand(len(chunk), *y.shape)
            for j, models in enumerate(personal):
                with torch.no_grad():
                    h = net.map(hits, {k: v[idx] for k, v in models.items()}, xs, ys).cpu().double().numpy()
                for i, reading_sets in enumerate(sets):
                    out[i, j, chunk] = [h[n, where[reading_sets[c]]].mean() for n, c in enumerate(chunk)]
    return {local_key(r, method): out[i] for i, r in enumerate(LOCAL_READINGS)}


def trained_params(p: Mapping) -> dict:
    """The parameters of the training run a re-evaluation reads: its own without ``reevaluate``."""
    return {k: v for k, v in p.items() if k != "reevaluate"}


def source_run(cfg: Mapping, exp_id: str, seed: int, p: Mapping):
    """The run directory of ``exp_id`` ``seed`` made with the parameters ``p`` (minus ``reevaluate``), at paper or
    quick scale, whichever's parameters those are; a ConfigError naming what to build when there is none."""
    run = find_run(cfg, exp_id, seed, trained_params(p), f"{exp_id}: re-evaluating seed {seed} (its final models)")
    if not (run / ARRAYS).is_file():
        raise ResultError(f"{run}: no {ARRAYS} (made before runs kept their final models): run it again")
    return run


def _per_client_sets(ds, reading: Mapping) -> tuple[list[np.ndarray], np.ndarray]:
    """Each client's test rows under the reading (indices into the partition's rows) and their counts."""
    o = ds.offsets("test")
    if reading["test_reading"] == "partition":
        sets = [np.arange(o[c], o[c + 1]) for c in range(ds.n_clients)]
        return sets, np.diff(o).astype(np.float64)
    digit = ds.client_meta("digit").astype(int)
    test_rows = np.arange(o[0], o[-1])
    by_digit = {d: test_rows[ds.labels[test_rows] == d] for d in np.unique(digit)}
    if reading["test_reading"] == "digit_all":
        sets = [by_digit[d] for d in digit]
    else:
        from fedrepro.seeding import rng_for

        n = reading["per_client"]
        short = [d for d, rows in by_digit.items() if len(rows) < n]
        if short:
            raise ConfigError(
                f"reevaluate.per_client={n}: digit {short[0]} has only {len(by_digit[short[0]])} test images"
            )
        rng = rng_for("fedhdp.test_reading", reading["sample_seed"])  # client by client, in client order
        sets = [rng.choice(by_digit[d], n, replace=False) for d in digit]
    return sets, np.array([len(s) for s in sets], dtype=np.float64)


def reevaluate(p: dict, ctx, private: np.ndarray, ds, data, factory) -> tuple[dict, dict[str, Check]]:
    """Metrics (``lam<λ>.<method>.<global key>``, as the trained run reports them, with the training kind's own
    column definitions) and checks of the trained run's final global models under ``p["reevaluate"]``, and its
    personal columns (``<local key>``): under the partition's reading the trained run's own, under a digit reading from
    the accuracies the run kept (``local_acc.*``), NaN where it kept none (a quick wiring run, ``local_readings:
    false``: its personal models are gone, so those columns cannot be had; a sweep's row on them is invalid there)."""
    import torch

    from fedrepro.learning.net import Net

    reading = p["reevaluate"]
    run = source_run(ctx.config, ctx.exp_id, ctx.seed, p)
    trained = read_metrics(run)
    with np.load(run / ARRAYS, allow_pickle=False) as arrays:
        finals = {k: arrays[k] for k in arrays.files}
    net = Net(factory())
    o = ds.offsets("test")
    rows = np.arange(o[0], o[-1])
    x, y = data.gather(rows)
    sets, counts = _per_client_sets(ds, reading)
    part_sets, part_counts = _per_client_sets(ds, {"test_reading": "partition"})
    metrics: dict = {}
    mismatch = []
    for name, spec in p["methods"].items():
        if p["only_methods"] is not None and name not in p["only_methods"]:
            continue
        params = {k.split(".", 1)[1]: torch.from_numpy(v) for k, v in finals.items() if k.split(".", 1)[0] == name}
        if not params:
            raise ResultError(f"{run / ARRAYS}: no final model of {name}")
        with torch.no_grad():
            correct = (net.logits(params, x).argmax(-1) == y).double().numpy()
        hit = np.zeros(len(ds.labels))
        hit[rows] = correct
        group_private, groups = method_groups(spec, private)
        per_client = np.array([hit[s].mean() if len(s) else np.nan for s in sets])
        local = finals.get(local_key(reading, name))  # (λ, client), where the run evaluated its personal models
        per_lam = client_metrics(
            per_client, list(local) if local is not None else [per_client], counts, group_private, groups
        )
        again = client_metrics(
            np.array([hit[s].mean() if len(s) else np.nan for s in part_sets]),
            [per_client],
            part_counts,
            group_private,
            groups,
        )[0]
        for key in ("acc_g", "acc_g_p", "acc_g_np"):
            want = trained["metrics"][lam_key(p["lams"][0])][name].get(key)
            if want is not None and not np.isclose(again[key], want, rtol=0, atol=1e-6):
                mismatch.append(f"{name}.{key}: {again[key]:.6f} here, {want:.6f} in {run / 'metrics.json'}")
        for j, lam in enumerate(p["lams"]):
            vals = {k: v for k, v in per_lam[j if local is not None else 0].items() if k in GLOBAL_KEYS}
            vals["acc_g"] = 100 * float(correct.mean())  # the server's test set: the whole MNIST test set (App. C)
            own = trained["metrics"][lam_key(lam)][name]
            for k in LOCAL_KEYS:
                if k not in own:  # a method without these columns in the trained run (no private or no opt-out group)
                    continue
                if reading["test_reading"] == "partition":
                    vals[k] = own[k]
                else:
                    vals[k] = per_lam[j].get(k, math.nan) if local is not None else math.nan
            metrics.setdefault(lam_key(lam), {})[name] = vals
    metrics["test_per_client"] = {"min": float(counts.min()), "mean": float(counts.mean()), "max": float(counts.max())}
    checks = {
        "reevaluation_matches_run": Check(
            not mismatch,
            "; ".join(mismatch[:3])
            or f"the kept final models give the trained run's global columns on the partition's test split ({run})",
        )
    }
    return metrics, checks
