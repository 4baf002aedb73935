"""The privacy experiment kinds: metric keys, checks (that can fail), determinism, parameter validation."""

import json

import numpy as np
import pytest
from kinds import call_kind

from fedrepro.aggregate import flatten
from fedrepro.config import validate
from fedrepro.errors import ConfigError
from fedrepro.experiments import RunContext, get_kind
from fedrepro.files import to_jsonable

CTX = RunContext("privacy.test", 0)
CURVE = {
    "noise_multiplier": 1.5,
    "sampling_rate": 0.05,
    "rounds": 60,
    "delta": 1e-4,
    "accountants": ["rdp", "rdp_classic", "pld", "opacus_rdp"],
    "curve_points": 3,
    "pld_discretization": 1e-3,
}


def run(kind, params, seed=0):
    return call_kind(kind, params, np.random.default_rng(seed), CTX)


def test_privacy_curve_metrics_history_checks():
    out = run("privacy_curve", CURVE)
    flat = flatten(out.metrics)
    for a in CURVE["accountants"]:
        assert np.isfinite(flat[f"epsilon.{a}"])
    assert {"order.rdp", "order.rdp_classic", "order.opacus_rdp"} <= set(flat) and "order.pld" not in flat
    assert flat["epsilon.pld"] < flat["epsilon.rdp"] < flat["epsilon.rdp_classic"]
    assert all(c.passed for c in out.checks.values()) and len(out.checks) == 3
    h = out.history
    assert sorted(h["round"].unique()) == [20, 40, 60] and set(h["accountant"]) == set(CURVE["accountants"])
    for a in CURVE["accountants"]:
        assert np.all(np.diff(h[h.accountant == a].sort_values("round")["epsilon"]) > 0)
    assert out.accountant["accountant"] == "rdp" and out.accountant["steps"] == 60
    json.dumps(to_jsonable({"m": out.metrics, "a": out.accountant}), allow_nan=False)


def test_privacy_curve_is_deterministic_and_ignores_rng():
    p = dict(CURVE, accountants=["rdp", "opacus_rdp"], primary="opacus_rdp")
    a, b = run("privacy_curve", p, seed=0), run("privacy_curve", p, seed=123)
    assert a.metrics == b.metrics and a.history.equals(b.history)
    assert a.accountant["library"] == "opacus"


def test_privacy_curve_agreement_check_can_fail():
    out = run(
        "privacy_curve", dict(CURVE, noise_multiplier=0.9, accountants=["rdp", "opacus_rdp"], agreement_rtol=1e-9)
    )
    assert not out.checks["rdp_agrees_with_opacus"].passed  # optimum at a fractional order: libraries differ


def test_privacy_curve_rejects_primary_outside_accountants():
    with pytest.raises(ConfigError, match="primary='pld'"):
        run("privacy_curve", dict(CURVE, accountants=["rdp"], primary="pld"))


@pytest.mark.parametrize(
    "kind,params,key",
    [
        ("privacy_curve", dict(CURVE, accountants=["moments"]), "accountants"),
        ("privacy_curve", dict(CURVE, sampling_rate=1.5), "sampling_rate"),
        ("privacy_curve", dict(CURVE, delta=1.0), "delta"),
        ("adaped_thm5", {"K": 50, "m": 50, "T_over_tau": 300, "delta": 1e-5, "targets": [3.35], "z": 1}, "z"),
        ("histograms_thm31", {"total_epsilon": 15, "delta": 1e-10}, "T"),
    ],
)
def test_schemas_reject_bad_params(kind, params, key):
    with pytest.raises(ConfigError, match=key):
        validate(params, get_kind(kind).schema, source="test")


def test_adaped_thm5_kind():
    out = run(
        "adaped_thm5", {"K": 50, "m": 50, "T_over_tau": 300, "delta": 1e-5, "targets": [3.35, 13.16, 27.30], "tau": 10}
    )
    flat = flatten(out.metrics)
    z = [flat[f"z.{k}"] for k in ("eps_3p35", "eps_13p16", "eps_27p30")]
    assert [float(f"{v:.3g}") for v in z] == [16.2, 5.08, 2.89]
    for k in ("eps_3p35", "eps_13p16", "eps_27p30"):
        assert flat[f"ratio.{k}"] > flat[f"ratio_triangle.{k}"] > 1
        assert flat[f"epsilon_library.{k}"] < flat[f"epsilon_library_triangle.{k}"]
    assert all(c.passed for c in out.checks.values())


def test_histograms_thm31_kind():
    out = run("histograms_thm31", {"total_epsilon": 15, "delta": 1e-10, "T": 50})
    flat = flatten(out.metrics)
    for r in ("total", "per_step", "basic"):
        assert {f"per_step_epsilon.{r}", f"sigma.{r}", f"total_delta.{r}"} <= set(flat)
    assert flat["per_step_epsilon.total"] == pytest.approx(0.084880, abs=1e-6)
    assert out.checks["composition_round_trip"].passed and len(out.history) == 3


def test_ppsgd_theorems_kind():
    out = run(
        "ppsgd_theorems",
        {"epsilons": [1.0, 4.0], "delta": 1e-4, "n": 100, "N": 1000, "T": 1000, "M": 10, "q": 0.01, "clip": 1.0},
    )
    flat = flatten(out.metrics)
    assert flat["thm41_sigma_zeta.eps_1p00"] == pytest.approx(4 * flat["thm41_sigma_zeta.eps_4p00"])
    assert flat["thm51_epsilon_limit"] == pytest.approx(0.1) and flat["thm51_applies.eps_1p00"] == 0.0
    assert "unspecified" in out.accountant["name"]
