"""A paper against itself: relations between its printed numbers (kind ``printed_relations``, issue #15).

Each relation names a printed quantity and what the paper's own statements say it must equal (or be at least / at
most), both written as expressions over registry rows, so the printed numbers are read from the registry
(config/targets/<paper>.csv), never typed again:

    expr := ROW_ID                      the row's printed value, as the interval its printed digits allow
          | NUMBER                      an exact number (a threshold the sentence itself states)
          | {minus: [expr, expr]}       a - b
          | {plus: [expr, ...]}
          | {gain_pct: [ref, new]}      100 (ref - new) / ref (a relative gain, positive when new is lower)
          | {gain_pct_of_new: [ref, new]}  100 (ref - new) / new (the same gain relative to the new value: the
                                        other reading of "x% gains")
          | {max: [expr, ...]} | {min: [expr, ...]}

A printed value v with d decimals stands for [v - h, v + h], h = half a unit of its last digit; expressions are
evaluated in interval arithmetic, so a relation fails only when no values the printed digits allow satisfy it.
``equals`` holds when the two intervals meet, ``at_least`` when value's upper end reaches the bound's lower end,
``at_most`` the reverse. Each relation is one check (a registry row of type ``consistency`` names it); a failed one
is a paper issue (the report's "Paper issues found"). Deterministic and cheap: no experiment runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from fedrepro.errors import ConfigError
from fedrepro.experiments import Check, RunContext, RunOutput, experiment_kind

OPS = ("minus", "plus", "gain_pct", "gain_pct_of_new", "max", "min")
EXPR = {
    "anyOf": [
        {"type": "string", "minLength": 1},
        {"type": "number"},
        {
            "type": "object",
            "minProperties": 1,
            "maxProperties": 1,
            "propertyNames": {"enum": list(OPS)},
            "additionalProperties": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/expr"}},
        },
    ]
}
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["relations"],
    "properties": {
        "relations": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "required": ["what", "value"],
                "minProperties": 3,
                "maxProperties": 3,  # what, value and exactly one of equals / at_least / at_most
                "properties": {
                    "what": {"type": "string", "minLength": 1},
                    "value": {"$ref": "#/$defs/expr"},
                    "equals": {"$ref": "#/$defs/expr"},
                    "at_least": {"$ref": "#/$defs/expr"},
                    "at_most": {"$ref": "#/$defs/expr"},
                },
            },
        },
    },
    "$defs": {"expr": EXPR},
}
RELATIONS = ("equals", "at_least", "at_most")


@dataclass(frozen=True)
class Interval:
    lo: float
    hi: float
    text: str

    @property
    def mid(self) -> float:
        return (self.lo + self.hi) / 2

    @property
    def half(self) -> float:
        return (self.hi - self.lo) / 2


def half_unit(text: str) -> float:
    """Half a unit of the last printed digit of a number as printed ("0.94" -> 0.005, "5" -> 0.5)."""
    mantissa = text.strip().lower().split("e")[0]
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    exponent = int(text.lower().split("e")[1]) if "e" in text.lower() else 0
    return 0.5 * 10.0 ** (exponent - decimals)


def evaluate(expr: Any, values: Mapping[str, tuple[float, str]]) -> Interval:
    """The interval of ``expr``; ``values``: row id -> (printed value, printed text)."""
    if isinstance(expr, bool):
        raise ConfigError(f"relation expression {expr!r}: not a row id, a number or an operation")
    if isinstance(expr, (int, float)):
        return Interval(float(expr), float(expr), f"{expr:g}")
    if isinstance(expr, str):
        if expr not in values:
            raise ConfigError(f"relation expression: no printed value for registry row {expr!r}")
        v, text = values[expr]
        h = half_unit(text)
        return Interval(v - h, v + h, text)
    ((op, args),) = expr.items()
    xs = [evaluate(a, values) for a in args]
    if op == "minus":
        if len(xs) != 2:
            raise ConfigError(f"relation expression {expr!r}: minus takes two terms")
        a, b = xs
        return Interval(a.lo - b.hi, a.hi - b.lo, f"({a.text} - {b.text})")
    if op == "plus":
        return Interval(sum(x.lo for x in xs), sum(x.hi for x in xs), "(" + " + ".join(x.text for x in xs) + ")")
    if op == "gain_pct":
        if len(xs) != 2 or xs[0].lo <= 0 or xs[1].lo < 0:
            raise ConfigError(f"relation expression {expr!r}: gain_pct takes [ref, new] with ref > 0, new >= 0")
        ref, new = xs
        return Interval(
            100 * (1 - new.hi / ref.lo), 100 * (1 - new.lo / ref.hi), f"100 ({ref.text} - {new.text}) / {ref.text}"
        )
    if op == "gain_pct_of_new":
        if len(xs) != 2 or xs[0].lo < 0 or xs[1].lo <= 0:
            raise ConfigError(f"relation expression {expr!r}: gain_pct_of_new takes [ref, new] with ref >= 0, new > 0")
        ref, new = xs
        return Interval(
            100 * (ref.lo / new.hi - 1), 100 * (ref.hi / new.lo - 1), f"100 ({ref.text} - {new.text}) / {new.text}"
        )
    pick = max if op == "max" else min
    return Interval(pick(x.lo for x in xs), pick(x.hi for x in xs), f"{op}(" + ", ".join(x.text for x in xs) + ")")


def judge(name: str, rel: Mapping, values: Mapping[str, tuple[float, str]]) -> Check:
    """One relation as a check: value (the distance is |value - bound| over the allowed rounding; <= 1 holds)."""
    how = next(r for r in RELATIONS if r in rel)
    x, b = evaluate(rel["value"], values), evaluate(rel[how], values)
    if how == "equals":
        ok = x.lo <= b.hi and b.lo <= x.hi
    elif how == "at_least":
        ok = x.hi >= b.lo
    else:
        ok = x.lo <= b.hi
    slack = x.half + b.half
    word = {"equals": "=", "at_least": ">=", "at_most": "<="}[how]
    detail = (
        f"{rel['what']}: {x.text} = {x.mid:.6g} (rounding ±{x.half:.3g}) {word} {b.text} = {b.mid:.6g} "
        f"(±{b.half:.3g}): {'holds' if ok else 'does not hold'} within the printed digits"
    )
    if how == "equals" or not ok:
        return Check(ok, detail, x.mid, b.mid, slack if slack > 0 else math.ulp(1.0))
    return Check(ok, detail)


def row_ids(expr: Any) -> list[str]:
    """The registry rows an expression reads."""
    if isinstance(expr, str):
        return [expr]
    if isinstance(expr, Mapping):
        return [r for args in expr.values() for a in args for r in row_ids(a)]
    return []


def _registry_values(cfg: Mapping, paper: str) -> dict[str, tuple[float, str]]:
    from fedrepro.config import resolve_path
    from fedrepro.report.registry import load_registry

    return {
        t.id: (t.value, t.value_text)
        for t in load_registry(resolve_path(cfg["targets"][paper]), paper)
        if t.value is not None
    }


def relation_inputs(p: dict, cfg: Mapping, exp_id: str) -> dict:
    """The printed values the relations read (a change in the registry reruns them)."""
    values = _registry_values(cfg, exp_id.split(".", 1)[0])
    ids = sorted(
        {r for rel in p["relations"].values() for k in ("value", *RELATIONS) if k in rel for r in row_ids(rel[k])}
    )
    return {r: values.get(r) for r in ids}


@experiment_kind(
    "printed_relations",
    SCHEMA,
    deterministic=True,
    metrics=("*.value", "*.bound"),
    checks=("*",),
    reads=relation_inputs,
)
def printed_relations(p: dict, rng, ctx: RunContext) -> RunOutput:
    if ctx.config is None:
        raise ConfigError(f"{ctx.exp_id}: printed relations read the registry: run with `python -m fedrepro run`")
    paper = ctx.exp_id.split(".", 1)[0]
    values = _registry_values(ctx.config, paper)
    checks, metrics, rows = {}, {}, []
    for name, rel in p["relations"].items():
        try:
            c = judge(name, rel, values)
        except ConfigError as exc:
            raise ConfigError(
                f"{ctx.config['papers'][paper]}: experiments.{ctx.exp_id.split('.', 1)[1]}.params."
                f"relations.{name}: {exc}"
            ) from None
        how = next(r for r in RELATIONS if r in rel)
        x, b = evaluate(rel["value"], values), evaluate(rel[how], values)
        checks[name] = c
        metrics[name] = {"value": x.mid, "bound": b.mid}
        rows.append(
            {
                "relation": name,
                "how": how,
                "value_lo": x.lo,
                "value_hi": x.hi,
                "bound_lo": b.lo,
                "bound_hi": b.hi,
                "holds": c.passed,
                "detail": c.detail,
            }
        )
    return RunOutput(metrics=metrics, history=pd.DataFrame(rows), checks=checks)


__all__ = ["Interval", "evaluate", "half_unit", "judge", "printed_relations", "relation_inputs", "row_ids"]
