"""One name registry for every pluggable thing: experiment kinds, plot styles, federated algorithms, partition schemes.

Which module defines which name is declared, not discovered: the shared layers pass their own paper-free names
(name -> absolute module) and the declaration each paper makes in its ``__init__`` (``KINDS``, ``PLOTS``,
``ALGORITHMS``, ``PARTITIONS``; fedrepro.papers). A lookup imports only the module declared for the name asked for,
which registers it (:meth:`Registry.register`). This module is the one place outside ``fedrepro.papers`` that loads
the papers' declarations: the only import from a shared layer up into the papers.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from fedrepro.errors import ConfigError

T = TypeVar("T")


def _origin(obj: object) -> str:
    """Where ``obj`` was defined (module.qualname), to name both sides of a duplicate registration."""
    target = getattr(obj, "fn", obj)  # an entry that wraps a function (an experiment Kind) is named by its function
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', type(target).__qualname__)}"


class Registry(Generic[T]):
    """name -> entry, filled by the modules declared for the names.

    what: what an entry is, in messages ("experiment kind"); shared: the paper-free names -> module; declaration:
    the papers' declaration that adds theirs (one of fedrepro.papers.DECLARATIONS), or None.
    """

    def __init__(self, what: str, shared: Mapping[str, str], declaration: str | None = None):
        self.what = what
        self.shared = dict(shared)
        self.declaration = declaration
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T) -> T:
        """Register ``entry`` as ``name``; a second, different entry under the same name is an error naming both.
        Re-importing the same definition (same module and qualified name) replaces it."""
        old = self._entries.get(name)
        if old is not None and old is not entry and _origin(old) != _origin(entry):
            raise RuntimeError(f"{self.what} {name!r} registered twice: by {_origin(old)} and by {_origin(entry)}")
        self._entries[name] = entry
        return entry

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@registry.register("name")`` registers the decorated object as ``name``."""

        def deco(obj: T) -> T:
            return self.add(name, obj)

        return deco

    def modules(self) -> dict[str, str]:
        """name -> the module that registers it: the shared names and every paper's declared ones."""
        if self.declaration is None:
            return dict(self.shared)
        from fedrepro.papers import declared  # the one upward import: the papers' declarations

        return self.shared | declared(self.declaration)

    def names(self) -> list[str]:
        return sorted(self.modules())

    def get(self, name: str, source: str | None = None) -> T:
        """The entry registered as ``name``, importing its declared module; an unknown name is a ConfigError
        (prefixed by ``source``, where the name was read) listing the known names."""
        if name not in self._entries:
            modules = self.modules()
            if name not in modules:
                where = f"{source}: " if source else ""
                raise ConfigError(f"{where}unknown {self.what} {name!r} (known: {', '.join(sorted(modules))})")
            importlib.import_module(modules[name])
            if name not in self._entries:
                raise RuntimeError(f"{self.what} {name!r} is declared in {modules[name]} but not registered there")
        return self._entries[name]

    def all(self) -> dict[str, T]:
        """Every declared entry (imports every declared module)."""
        return {name: self.get(name) for name in self.modules()}

    def registered(self) -> dict[str, T]:
        """What the modules imported so far registered (without importing anything)."""
        return dict(self._entries)
