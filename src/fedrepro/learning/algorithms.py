"""The federated algorithms a training kind can name, keyed by ``Algorithm.name`` (one registry for every kind).

The paper-free algorithms live in this package (their modules are listed in fedrepro.learning.engine.ALGORITHMS); a
paper's own algorithm lives with its paper and is declared in its ``ALGORITHMS`` (fedrepro.papers), e.g. AdaPeD or
FedHDP. :func:`get_algorithm` imports only the module of the algorithm asked for; every subclass of Algorithm that
sets ``name`` registers itself under it.
"""

from __future__ import annotations

from fedrepro.errors import ConfigError
from fedrepro.learning.engine import ALGORITHMS, Algorithm

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
    return ALGORITHMS.modules()


def names() -> list[str]:
    return ALGORITHMS.names()


def get_algorithm(name: str) -> type[Algorithm]:
    """The Algorithm subclass whose ``name`` is ``name`` (defined in the module declared for it)."""
    if name in _EXTERNAL:
        return _EXTERNAL[name]
    return ALGORITHMS.get(name)


def build_algorithm(name: str, **kwargs) -> Algorithm:
    """An instance of algorithm ``name``; a wrong keyword is a configuration error naming the algorithm."""
    cls = get_algorithm(name)
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"algorithm {name}: {exc}") from None
