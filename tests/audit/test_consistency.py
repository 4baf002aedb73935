"""Relations between a paper's printed numbers (fedrepro.audit.consistency): interval arithmetic over the
printed digits, each relation holding or failing, and the kind reading the registry."""

import pytest

from fedrepro.audit.consistency import evaluate, half_unit, judge
from fedrepro.config import load_global
from fedrepro.errors import ConfigError
from fedrepro.experiments import RunContext, get_kind

V = {
    "np": (92.61, "92.61"),
    "p": (91.65, "91.65"),
    "d_bad": (0.94, "0.94"),
    "d_ok": (0.96, "0.96"),
    "ref": (100.0, "100.0"),
    "new": (95.2, "95.2"),
    "five": (5.0, "5"),
}


def test_half_a_unit_of_the_last_printed_digit():
    assert half_unit("0.94") == 0.005 and half_unit("5") == 0.5 and half_unit("-0.4") == 0.05
    assert half_unit("1.5e-3") == pytest.approx(5e-5)


def test_interval_arithmetic():
    d = evaluate({"minus": ["np", "p"]}, V)
    assert d.lo == pytest.approx(0.95) and d.hi == pytest.approx(0.97)
    g = evaluate({"gain_pct": ["ref", "new"]}, V)
    assert g.lo == pytest.approx(100 * (1 - 95.25 / 99.95)) and g.hi == pytest.approx(100 * (1 - 95.15 / 100.05))
    assert evaluate({"max": [3, {"minus": [10, 4]}]}, V).mid == 6


@pytest.mark.parametrize(
    "rel, holds",
    [
        ({"value": "d_ok", "equals": {"minus": ["np", "p"]}}, True),
        ({"value": "d_bad", "equals": {"minus": ["np", "p"]}}, False),  # 0.94 vs 0.96: apart by more than rounding
        ({"value": {"gain_pct": ["ref", "new"]}, "at_least": "five"}, True),  # 4.8% reaches 5 - 0.5
        ({"value": {"gain_pct": ["ref", "new"]}, "at_least": 5.0}, False),  # an exact 5: 4.8% (at most 4.90) is not
        ({"value": 3, "at_most": 2}, False),
    ],
)
def test_relations_hold_or_fail(rel, holds):
    c = judge("r", dict(rel, what="w"), V)
    assert c.passed is holds
    if not holds:
        assert c.tolerance is not None and abs(c.value - c.expected) > c.tolerance


def test_an_unknown_row_is_a_config_error():
    with pytest.raises(ConfigError, match="no printed value for registry row 'nope'"):
        judge("r", {"what": "w", "value": "nope", "equals": 1}, V)


def test_the_kind_reads_the_registry():
    kind = get_kind("printed_relations")
    params = {
        "relations": {
            "r1": {"what": "Remark 1 vs itself", "value": "R1.ex", "equals": "R1.ex"},
            "r2": {"what": "Remark 1's ratio is not 0.5", "value": "R1.ex", "equals": 0.5},
        }
    }
    out = kind.fn(params, None, RunContext("adaped.consistency", 0, config=load_global()))
    assert out.checks["r1"].passed and not out.checks["r2"].passed
    assert out.metrics["r2"] == {"value": 0.01, "bound": 0.5}
    assert kind.reads(params, load_global(), "adaped.consistency") == {"R1.ex": (0.01, "0.01")}


def test_a_gain_relative_to_the_new_value_is_the_other_reading_of_x_percent_gains():
    """Histograms Sec. 1 on Table 1 (issue 30): 0.912 vs 0.868 is 4.8 % of the baseline but 5.07 % of Alg. 2's value;
    the same relation holds under one reading and fails under the other."""
    from fedrepro.audit.consistency import evaluate, judge

    values = {"base": (0.912, "0.912"), "ours": (0.868, "0.868")}
    of_new = evaluate({"gain_pct_of_new": ["base", "ours"]}, values)
    assert of_new.lo == pytest.approx(100 * (0.9115 / 0.8685 - 1)) and of_new.hi == pytest.approx(
        100 * (0.9125 / 0.8675 - 1)
    )
    rel = {"what": "x", "at_least": 5}
    assert judge("a", {**rel, "value": {"gain_pct_of_new": ["base", "ours"]}}, values).passed
    assert not judge("b", {**rel, "value": {"gain_pct": ["base", "ours"]}}, values).passed
    with pytest.raises(ConfigError, match="gain_pct_of_new takes"):
        evaluate({"gain_pct_of_new": ["base", 0]}, values)
