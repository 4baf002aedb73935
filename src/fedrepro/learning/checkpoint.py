"""Round checkpoints of a training run, so a killed job continues where it stopped and ends with the same result.

A checkpoint holds everything the round loop carries from one round to the next: the algorithm's state (any
dataclass of tensors, dicts/lists of tensors, scalars, nested dataclasses and torch Generators; the functional
:class:`~fedrepro.learning.net.Net` is rebuilt, not saved), the numpy stream's bit-generator state, the engine's
torch Generator state, the counters and the history so far. It is written with ``torch.save`` to a temporary file
and renamed into place (a kill never leaves a half-written checkpoint) and read back with
``torch.load(weights_only=True)``: only tensors and plain containers, never arbitrary pickled objects.

A checkpoint also stores a *fingerprint* of what produced it (the caller's description of the run: experiment
parameters, seed, method, learning rate) and the package's source files its process had imported
(fedrepro.provenance.loaded_code); one with another fingerprint, or made when one of those files read otherwise, is
ignored, so neither a changed configuration nor changed code resumes from stale state. With a
:class:`~fedrepro.runio.RunClock` it also carries the run's compute time so far (``elapsed_s``), so the
``wall_time_s`` of a resumed run counts the attempts before the kill too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from fedrepro.runio import RunClock

_SCALARS = (int, float, bool, str, type(None))


def fingerprint(obj: Any) -> str:
    """A stable hash of a JSON-able description of a run."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def pack(obj: Any) -> Any:
    """``obj`` as tensors and plain containers (the only things ``torch.load(weights_only=True)`` accepts)."""
    from fedrepro.learning.net import Net

    if isinstance(obj, Net):
        return {"__net__": True}
    if isinstance(obj, torch.Generator):
        return {"__generator__": obj.get_state()}
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        # torch.save writes a tensor's whole storage: a view is copied out first; a tensor that fills its storage is
        # saved as it is (FedHDP's Ditto models are ~1 GB per method: the copy took ~0.8 s of each ~4 s save)
        return t if t.is_contiguous() and t.untyped_storage().nbytes() == t.numel() * t.element_size() else t.clone()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        cls = type(obj)
        return {
            "__dataclass__": f"{cls.__module__}:{cls.__qualname__}",
            "fields": {f.name: pack(getattr(obj, f.name)) for f in dataclasses.fields(obj)},
        }
    if isinstance(obj, dict):
        return {"__dict__": [[k, pack(v)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        return {"__list__": [pack(v) for v in obj], "tuple": isinstance(obj, tuple)}
    if isinstance(obj, _SCALARS):
        return obj
    raise TypeError(f"cannot checkpoint a {type(obj).__name__}")


def restore(current: Any, saved: Any) -> Any:
    """The value ``saved`` describes, reusing ``current`` where it must (the Net, Generators, dataclass objects are
    updated in place so references to them stay valid)."""
    if isinstance(saved, torch.Tensor):
        return saved
    if not isinstance(saved, dict):
        return saved
    if "__net__" in saved:
        return current
    if "__generator__" in saved:
        gen = current if isinstance(current, torch.Generator) else torch.Generator()
        gen.set_state(saved["__generator__"])
        return gen
    if "__dataclass__" in saved:
        obj = current
        if obj is None or f"{type(obj).__module__}:{type(obj).__qualname__}" != saved["__dataclass__"]:
            module, name = saved["__dataclass__"].split(":")
            if not module.startswith("fedrepro."):
                raise ValueError(f"checkpoint names a class outside fedrepro: {saved['__dataclass__']}")
            cls = importlib.import_module(module)
            for part in name.split("."):
                cls = getattr(cls, part)
            obj = cls.__new__(cls)
        for name, value in saved["fields"].items():
            object.__setattr__(obj, name, restore(getattr(obj, name, None), value))
        return obj
    if "__dict__" in saved:
        cur = current if isinstance(current, dict) else {}
        return {k: restore(cur.get(k), v) for k, v in saved["__dict__"]}
    if "__list__" in saved:
        cur = list(current) if isinstance(current, (list, tuple)) else []
        out = [restore(cur[i] if i < len(cur) else None, v) for i, v in enumerate(saved["__list__"])]
        return tuple(out) if saved["tuple"] else out
    raise ValueError(f"unrecognized checkpoint entry with keys {sorted(saved)}")


@dataclasses.dataclass(frozen=True)
class Checkpointer:
    """Save the round loop every ``every`` rounds to ``path`` (and after the last round); resume from it when its
    fingerprint matches."""

    path: Path
    fingerprint: str
    every: int = 10
    clock: RunClock | None = None  # the run's compute time: saved in each checkpoint, resumed from on load

    def load(self) -> dict | None:
        from fedrepro.provenance import made_by_this_code

        if not self.path.is_file():
            return None
        try:
            data = torch.load(self.path, weights_only=True)
        except Exception:  # unreadable (e.g. a foreign file): start over, it gets replaced
            return None
        if not isinstance(data, dict) or data.get("fingerprint") != self.fingerprint:
            return None
        if not made_by_this_code(data.get("code"), self.path):
            return None
        if self.clock is not None and isinstance(data.get("elapsed_s"), (int, float)):
            self.clock.resumed_from(data["elapsed_s"])
        return data

    def due(self, r: int, rounds: int) -> bool:
        return r == rounds or (self.every > 0 and r % self.every == 0)

    def save(self, payload: dict) -> None:
        from fedrepro.files import atomic_write
        from fedrepro.provenance import loaded_code

        elapsed = {} if self.clock is None else {"elapsed_s": self.clock.total_s()}
        head = {"fingerprint": self.fingerprint, "code": loaded_code(), **elapsed}
        atomic_write(self.path, lambda tmp: torch.save({**head, **payload}, tmp))


def run_checkpointer(
    checkpoint_dir: Path | str | None,
    exp_id: str,
    params: Any,
    seed: int,
    label: str,
    every: int = 10,
    clock: RunClock | None = None,
) -> Checkpointer | None:
    """The checkpointer of one training (``label``: method, epsilon, lr ...) of one experiment run, fingerprinted by
    the run's parameters and seed; None when the run keeps no checkpoints. ``clock``: the run's (RunContext.clock)."""
    if checkpoint_dir is None:
        return None
    fp = fingerprint({"exp": exp_id, "params": params, "seed": seed, "training": label})
    return Checkpointer(Path(checkpoint_dir) / f"{fp[:16]}.pt", fp, every=every, clock=clock)
