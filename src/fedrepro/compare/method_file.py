"""Load a user's Algorithm subclass from one Python file, and guard its training.

An error in the file (a syntax error, an exception at import, no such class, not an Algorithm, an abstract method
left out) is one line ``FILE:LINE: message`` (a :class:`~fedrepro.errors.ConfigError`). During training the class is
wrapped (:func:`guarded`) so that a non-finite training loss or deployed model raises :class:`MethodFailed`, and any
exception the user's code raises is reported by :func:`failure` as ``FILE:LINE: Type: message``: the caller marks the
method's row failed and goes on with the other rows.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
import traceback
from pathlib import Path

import torch

from fedrepro.errors import ConfigError
from fedrepro.learning.dp import GaussianMechanism
from fedrepro.learning.engine import Algorithm, Diverged, Released


class MethodFailed(Diverged):
    """The user's method produced something the engine cannot evaluate (a non-finite loss or model)."""


def parse_spec(spec: str) -> tuple[Path, str]:
    """``FILE:CLASS`` -> (file, class name)."""
    file, sep, name = spec.rpartition(":")
    if not sep or not file or not name.isidentifier():
        raise ConfigError(f"method {spec!r}: expected FILE:CLASS, e.g. examples/fedprox.py:FedProx")
    return Path(file), name


def _line_in(path: Path, tb) -> int | None:
    """The last line of ``path`` in traceback ``tb`` (where the user's code raised), or None."""
    target = str(path.resolve())
    lines = [f.lineno for f in traceback.extract_tb(tb) if str(Path(f.filename).resolve()) == target]
    return lines[-1] if lines else None


def load_method(spec: str, base: type = Algorithm) -> type:
    """The ``base`` subclass ``CLASS`` of file ``FILE`` (an engine Algorithm, or the interface of the experiment's
    method slot, e.g. a histogram estimator), executed as a module of its own; its directory is put on ``sys.path``,
    so it may import the modules beside it; one line on error."""
    path, name = parse_spec(spec)
    if not path.is_file():
        raise ConfigError(f"{path}: no such method file (give FILE:CLASS with FILE a Python file)")
    here = str(path.resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    module_name = f"fedrepro_method_{path.stem}_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise ConfigError(f"{path}: not a Python file Python can import")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module  # dataclasses and pickling look their module up here
    try:
        loader_spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(module_name, None)
        raise ConfigError(f"{path}:{exc.lineno}: SyntaxError: {exc.msg}") from None
    except Exception as exc:  # the user's module raised while it was imported: name the line
        sys.modules.pop(module_name, None)
        line = _line_in(path, exc.__traceback__)
        raise ConfigError(f"{path}:{line or 1}: {type(exc).__name__} while importing: {exc}") from None
    cls = getattr(module, name, None)
    if cls is None:
        found = sorted(k for k, v in vars(module).items() if inspect.isclass(v) and v.__module__ == module_name)
        raise ConfigError(f"{path}:1: no class {name} (classes defined there: {', '.join(found) or 'none'})")
    line = _class_line(cls, path)
    if not (inspect.isclass(cls) and issubclass(cls, base)):
        raise ConfigError(f"{path}:{line}: {name} is not a subclass of {base.__module__}.{base.__qualname__}")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise ConfigError(f"{path}:{line}: {name} does not implement {missing} (README: Compare your method)")
    return cls


def _class_line(cls, path: Path) -> int:
    try:
        return inspect.getsourcelines(cls)[1]
    except (OSError, TypeError):
        return 1


def method_sources(path: Path) -> dict[str, str]:
    """The method's code, file by file (path -> sha256): the method file, every ``.py`` file beside it and in the
    packages under its directory (what it may import as its own), and any other module loaded so far from outside
    the interpreter's installation and fedrepro. compare's cache key and compare.json cover all of it: editing a
    module the method imports trains it again."""
    from fedrepro.data.stamps import sha256_of

    path = Path(path).resolve()
    here = path.parent
    files = {path, *here.glob("*.py")}
    for init in here.glob("*/**/__init__.py"):  # packages beside the method file (not arbitrary subdirectories)
        if all((p / "__init__.py").is_file() for p in init.parent.relative_to(here).parents if p != Path(".")):
            files |= set(init.parent.glob("*.py"))
    installed = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    package = Path(__file__).resolve().parents[1]  # fedrepro itself: provenance.code_files covers it
    for module in list(sys.modules.values()):
        f = getattr(module, "__file__", None)
        if not f or not f.endswith(".py"):
            continue
        f = Path(f).resolve()
        if not any(f.is_relative_to(d) for d in (*installed, package)) and "site-packages" not in f.parts:
            files.add(f)
    out = {}
    for f in sorted(files):
        if "__pycache__" in f.parts or not f.is_file():
            continue
        key = f.relative_to(here).as_posix() if f.is_relative_to(here) else str(f)
        out[key] = sha256_of(f)
    return out


def guarded(cls: type[Algorithm], path: Path, args: dict | None = None, release: bool = False) -> type[Algorithm]:
    """``cls`` with its training losses and deployed models checked (a NaN or inf raises :class:`MethodFailed`) and
    ``args`` (``compare --method-arg``) passed to its constructor by every protocol. ``release``: privacy by
    construction per local step (MethodSlot.releases_steps): the ``dp`` mechanism the protocol constructs the method
    with is kept from it, and each local step's minibatches reach it as :class:`Released` under that mechanism,
    noised with the engine's generator (the one DP-FedAvg draws its noise from)."""
    cls = with_args(cls, path, args)

    class Guarded(cls):  # type: ignore[misc,valid-type]
        if release:

            def __init__(self, *a, dp=None, **kw):
                super().__init__(*a, **kw)
                self._fedrepro_release = GaussianMechanism.parse(dp)

            def init_state(self, net, n_clients, generator):
                self._fedrepro_noise = generator
                return super().init_state(net, n_clients, generator)

        def local_step(self, state, x, y, selected, lr):
            if getattr(self, "_fedrepro_release", None) is not None:
                x, y = Released(x, y, self._fedrepro_release, self._fedrepro_noise), None
            losses = super().local_step(state, x, y, selected, lr)
            if not torch.isfinite(torch.as_tensor(losses)).all():
                raise MethodFailed(
                    f"{path}: {cls.__name__}.local_step returned a non-finite training loss at lr={lr:g}"
                )
            return losses

        def deployed_params(self, state, ctx=None):
            params = super().deployed_params(state, ctx)
            bad = sorted(k for k, v in params.items() if not torch.isfinite(v).all())
            if bad:
                raise MethodFailed(f"{path}: {cls.__name__}.deployed_params has non-finite values in {', '.join(bad)}")
            return params

    Guarded.__name__ = Guarded.__qualname__ = cls.__name__
    Guarded.name = method_name(cls)
    return Guarded


def with_args(cls: type, path: Path, args: dict | None = None) -> type:
    """``cls`` constructed with ``args`` (``compare --method-arg``) by every protocol; a keyword its constructor does
    not take is one line naming the file."""
    args = dict(args or {})
    unknown = [k for k in args if not takes_keyword(cls, k)]
    if unknown:
        raise ConfigError(
            f"{path}:{_class_line(cls, path)}: --method-arg {unknown[0]}: {cls.__name__}.__init__ takes no keyword "
            f"{unknown[0]!r}"
        )
    if not args:
        return cls

    class WithArgs(cls):  # type: ignore[misc,valid-type]
        def __init__(self, *a, **kw):
            super().__init__(*a, **{**args, **kw})

    WithArgs.__name__ = WithArgs.__qualname__ = cls.__name__
    WithArgs.name = method_name(cls)
    return WithArgs


def method_name(cls: type[Algorithm]) -> str:
    """A user's method's row name: its class attribute ``name`` where it sets one, else the class name lowercased."""
    return cls.__dict__.get("name") or cls.__name__.lower()


def accepts(cls: type[Algorithm], keyword: str) -> bool:
    """Whether the constructor of ``cls`` takes keyword ``keyword`` (or any keyword)."""
    params = inspect.signature(cls).parameters.values()
    return any(p.name == keyword or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def takes_keyword(cls: type, keyword: str) -> bool:
    """Whether constructing ``cls`` can take ``keyword``: its ``__init__`` names it, or passes ``**kwargs`` on to a
    base class's ``__init__`` that does (followed along the MRO; a chain that ends in ``**kwargs`` of an unknown
    callee is given the benefit of the doubt)."""
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        if klass is object:
            return False
        params = inspect.signature(init).parameters.values()
        if any(p.name == keyword and p.kind is not inspect.Parameter.VAR_KEYWORD for p in params):
            return True
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return False
    return True


def failure(exc: BaseException, path: Path) -> str:
    """One line saying why the user's method failed: ``FILE:LINE: Type: message`` when its own code raised."""
    if isinstance(exc, MethodFailed):
        return str(exc)
    line = _line_in(path, exc.__traceback__)
    where = f"{path}:{line}" if line else str(path)
    return f"{where}: {type(exc).__name__}: {exc}"
