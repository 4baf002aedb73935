"""The histograms experiment kinds: the synthetic extra (small run) and Table 1 (on token histograms drawn from the
model, in the data layer's TokenHistograms format), their config entries and the registry keys they must produce."""

import csv

import numpy as np
import pytest

from fedrepro.config import REPO_ROOT, load_global, resolve_experiment
from fedrepro.papers.histograms.reddit import TokenHistograms
from fedrepro.errors import DataError
from fedrepro.experiments import RunContext, get_kind
from fedrepro.papers.histograms.experiments.table1 import histogram_data, run_table1
from fedrepro.papers.histograms.generator import make_mixture, sample_users
from fedrepro.papers.histograms.pipeline import METHODS

ROOT = REPO_ROOT
CFG = load_global()
ALGO = {"K": 3, "T": 10, "tau": 0.5, "lam": 0.3, "local_beta": 0.5, "center_floor": 1e-12,
        "dimred": {"keep_tokens": 15}, "ifca_lr": 5.0, "ifca_init_mix": 0.5,
        "private": {"total_epsilon": 15.0, "delta": 1e-10, "clip": 1.0, "s": 1e-3, "ifca_clip": 1.0},
        "regimes": ["nonprivate", "private"], "trace_users": 200, "dtype": "float64"}
SMALL = dict(ALGO, n_users=1500, d=100, clusters=3, alpha=40.0, m=50, zipf=1.0, gamma=2.0, n_val=300, m_val=200,
             z=4, near_oracle_rtol=0.05)


def _flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def _registry(experiment):
    with open(ROOT / CFG["targets"]["histograms"], encoding="utf-8") as f:
        return [r for r in csv.DictReader(f) if r["experiment"] == experiment]


def test_synthetic_run_produces_every_registered_key_and_the_papers_ordering():
    out = get_kind("histograms_synthetic").fn(SMALL, np.random.default_rng(0), RunContext("histograms.x", 0))
    flat = _flat(out.metrics)
    for r in _registry("histograms.x_synthetic"):
        if r["key"].startswith("check:"):
            assert set(r["key"][6:].split(",")) <= set(out.checks), r["id"]
        else:
            assert r["key"] in flat, r["id"]
    for regime in ("nonprivate", "private"):
        assert set(out.metrics["kl"][regime]) == set(METHODS)
    for name in ("ordering_nonprivate", "clustering_beats_fedavg_nonprivate", "finetuning_helps_nonprivate",
                 "local_matches_closed_form", "lloyd_objective_monotone"):
        assert out.checks[name].passed, out.checks[name].detail
    assert out.metrics["kl"]["private"]["local"] == out.metrics["kl"]["nonprivate"]["local"]
    h = out.history
    assert set(h["method"]) == {"alg2", "alg2_dimred", "ifca"} and (h["iteration"] == 0).any()


def _token_histograms(seed=0, n=800, d=80, m=50, m_test=400, n_val=200):
    rng = np.random.default_rng(seed)
    mix = make_mixture(d, 3, 40.0, 1.0, 2.0, rng)
    u = sample_users(mix, n, m, m_test, rng, dtype=np.float64)
    val_index = np.sort(rng.choice(n, n_val, replace=False))
    val = sample_users(mix, n_val, 200, 0, rng).train
    return TokenHistograms(tuple(f"u{i}" for i in range(n)), tuple(f"t{i}" for i in range(d)), u.train, u.test,
                           val_index, val)


def test_table1_produces_exactly_the_registered_keys():
    p = dict(ALGO, vocab_size=80, train_tokens=50, test_tokens=400, val_users=200, val_tokens=200, split_seed=0,
             runs=2)
    out = run_table1(histogram_data(_token_histograms(), p), p, np.random.default_rng(1))
    flat = _flat(out.metrics)
    rows = _registry("histograms.table1")
    assert len(rows) == 18
    assert {r["key"] for r in rows} == {k for k in flat if k.startswith("kl.")}
    k = out.metrics["kl"]["nonprivate"]
    assert k["alg2_ft"] < k["fedavg_ft"] < k["local"]
    assert all(v >= 0 for v in out.metrics["kl_std"]["private"].values())


def test_table1_kind_needs_the_reddit_dataset():
    exp = resolve_experiment(CFG, "histograms.table1", "paper")
    with pytest.raises(DataError, match="reddit"):
        get_kind("histograms_table1").fn(exp.params, np.random.default_rng(0), RunContext("histograms.table1", 0))


@pytest.mark.parametrize("scale", ["quick", "paper"])
def test_config_entries_validate(scale):
    for name in ("x_synthetic", "table1", "thm31_budget"):
        resolve_experiment(CFG, f"histograms.{name}", scale)
    syn = resolve_experiment(CFG, "histograms.x_synthetic", "paper").params
    assert (syn["n_users"], syn["d"], syn["K"], syn["T"]) == (100000, 1000, 10, 50)
    t1 = resolve_experiment(CFG, "histograms.table1", "paper")
    assert t1.params["runs"] == 20 and t1.params["lam"] == 0.3 and t1.params["tau"] == 0.5
