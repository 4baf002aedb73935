"""The one name registry (fedrepro.registry) behind kinds, plots, algorithms and partition schemes."""

from __future__ import annotations

import pytest

from fedrepro.data.partition import SCHEMES, register
from fedrepro.errors import ConfigError
from fedrepro.experiments import KINDS, experiment_kind
from fedrepro.learning.engine import ALGORITHMS
from fedrepro.learning.models import MODELS, model
from fedrepro.plots import PLOTS, plot
from fedrepro.registry import Registry


def first():
    pass


def second():
    pass


def test_a_duplicate_name_names_both_definitions():
    reg = Registry("widget", {})
    reg.register("w")(first)
    reg.register("w")(first)  # the same definition again (a re-import) is no duplicate
    with pytest.raises(RuntimeError, match=r"widget 'w' registered twice: by .*test_registry.first and by .*second"):
        reg.register("w")(second)
    assert reg.registered() == {"w": first}


def test_an_unknown_name_lists_the_known_ones():
    reg = Registry("widget", {"a": __name__, "b": __name__})
    with pytest.raises(ConfigError, match=r"^cfg.yaml: unknown widget 'c' \(known: a, b\)$"):
        reg.get("c", "cfg.yaml")


def test_a_declared_name_its_module_does_not_register_is_an_error():
    reg = Registry("widget", {"a": __name__})
    with pytest.raises(RuntimeError, match="widget .a. is declared in .*test_registry but not registered there"):
        reg.get("a")


def taken(registry: Registry) -> str:
    """A name some module of the package already registers in ``registry``."""
    name = sorted(registry.modules())[0]
    registry.get(name)
    return name


def test_every_registry_refuses_a_duplicate():
    with pytest.raises(RuntimeError, match="experiment kind .* registered twice"):
        experiment_kind(taken(KINDS), {})(second)
    with pytest.raises(RuntimeError, match="plot .* registered twice"):
        plot(taken(PLOTS))(second)
    with pytest.raises(RuntimeError, match="partition scheme .* registered twice"):
        register(taken(SCHEMES))(second)
    with pytest.raises(RuntimeError, match="model .* registered twice"):
        model(taken(MODELS))(second)
    base = ALGORITHMS.get(taken(ALGORITHMS))
    with pytest.raises(RuntimeError, match="algorithm .* registered twice"):
        type("Impostor", (base,), {"name": base.name, "__module__": "fedrepro.impostor"})  # one of the package's
    outside = type("Outside", (base,), {"name": base.name})  # a user's or a test's class: never in the registry
    assert ALGORITHMS.get(base.name) is base and outside is not base
