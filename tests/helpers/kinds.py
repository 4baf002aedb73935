"""An experiment kind called as a run calls it: its parameters resolved first (the schema's defaults filled in,
validated; fedrepro.config.resolve_params), so that a test may give only the parameters it is about."""

from fedrepro.config import resolve_params
from fedrepro.experiments import get_kind


def call_kind(name: str, params: dict, rng, ctx):
    kind = get_kind(name)
    return kind.fn(resolve_params(params, kind.schema, source=f"test params of {name}"), rng, ctx)
