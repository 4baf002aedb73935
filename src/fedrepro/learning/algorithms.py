"""The federated algorithms a training kind can name, keyed by ``Algorithm.name`` (one registry for every kind).

The paper-free algorithms live in this package (:data:`SHARED`); a paper's own algorithm lives with its paper and
is declared in its ``ALGORITHMS`` (fedrepro.papers), e.g. AdaPeD or FedHDP. :func:`get_algorithm` imports only the
module of the algorithm asked for and returns the class whose ``name`` it is.
"""

from __future__ import annotations

import importlib
import inspect

from fedrepro.errors import ConfigError
from fedrepro.learning.engine import Algorithm

SHARED = {
    "local": "fedrepro.learning.local",
    "fedavg": "fedrepro.learning.fedavg",
    "fedavg_ft": "fedrepro.learning.fedavg",
    "dp_fedavg_server": "fedrepro.learning.dp_fedavg",
    "dp_fedavg_adaptive": "fedrepro.learning.dp_fedavg_adaptive",
    "pfedme": "fedrepro.learning.pfedme",
    "perfedavg": "fedrepro.learning.perfedavg",
    "quped": "fedrepro.learning.quped",
    "fml": "fedrepro.learning.fml",
}


# Algorithms from outside the package (a user's method file, fedrepro.compare), by name, for this process only.
_EXTERNAL: dict[str, type[Algorithm]] = {}


def register_external(cls: type[Algorithm]) -> str:
    """Make ``cls`` (an Algorithm subclass loaded from a user's file) buildable by its ``name`` in this process; the
    name must not be one of the package's algorithms. Returns the name."""
    name = cls.__dict__.get("name") or cls.__name__.lower()
    if name in algorithm_modules():
        raise ConfigError(
            f"{cls.__name__}.name = {name!r} is the name of one of fedrepro's algorithms; give the class another name"
        )
    _EXTERNAL[name] = cls
    return name


def algorithm_modules() -> dict[str, str]:
    """Algorithm.name -> the module that defines it: this package's algorithms and every paper's ``ALGORITHMS``."""
    from fedrepro.papers import declared

    return SHARED | declared("ALGORITHMS")


def names() -> list[str]:
    return sorted(algorithm_modules())


def get_algorithm(name: str) -> type[Algorithm]:
    """The Algorithm subclass whose ``name`` is ``name`` (defined in the module declared for it)."""
    if name in _EXTERNAL:
        return _EXTERNAL[name]
    modules = algorithm_modules()
    if name not in modules:
        raise ConfigError(f"unknown algorithm {name!r} (known: {', '.join(sorted(modules))})")
    module = importlib.import_module(modules[name])
    for obj in vars(module).values():
        if inspect.isclass(obj) and issubclass(obj, Algorithm) and obj.__dict__.get("name") == name:
            return obj
    raise RuntimeError(f"algorithm {name!r} is declared in {modules[name]} but no class there has that name")


def build_algorithm(name: str, **kwargs) -> Algorithm:
    """An instance of algorithm ``name``; a wrong keyword is a configuration error naming the algorithm."""
    cls = get_algorithm(name)
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"algorithm {name}: {exc}") from None
