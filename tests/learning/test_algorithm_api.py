"""The public Algorithm interface (README "Compare your method") and the class agree: the README's member table
lists exactly the class's public members, each method with its parameters, required exactly when abstract, and the
interface version is ALGORITHM_API_VERSION. Changing the class without the README (or the version) fails here."""

from __future__ import annotations

import inspect
import re
from abc import abstractmethod
from pathlib import Path

from fedrepro.learning.engine import ALGORITHM_API_VERSION, Algorithm

README = Path(__file__).resolve().parents[2] / "README.md"


def documented(text: str) -> tuple[int | None, dict[str, tuple[tuple[str, ...] | None, bool]]]:
    """(interface version, {member: (method parameters or None for an attribute, required)}) from the README's
    section "Compare your method"."""
    section = text.split("## Compare your method", 1)[1].split("\n## ", 1)[0]
    version = re.search(r"Interface version (\d+) \(`fedrepro\.learning\.engine\.ALGORITHM_API_VERSION`\)", section)
    members = {}
    for cell, required in re.findall(r"^\| `([^`]+)` \| (yes|no) \|", section, flags=re.M):
        m = re.fullmatch(r"(\w+)(?:\((.*)\))?", cell)
        args = None if m.group(2) is None else tuple(a.strip() for a in m.group(2).split(",") if a.strip())
        members[m.group(1)] = (args, required == "yes")
    return (int(version.group(1)) if version else None), members


def actual(cls: type) -> dict[str, tuple[tuple[str, ...] | None, bool]]:
    out = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        value = inspect.getattr_static(cls, name)
        if callable(value):
            params = tuple(p for p in inspect.signature(value).parameters if p != "self")
            out[name] = (params, name in cls.__abstractmethods__)
        else:
            out[name] = (None, False)
    return out


def mismatches(text: str, cls: type, version: int) -> list[str]:
    doc_version, doc = documented(text)
    real = actual(cls)
    out = [
        f"{k}: README {doc.get(k)} vs class {real.get(k)}"
        for k in sorted(set(doc) | set(real))
        if doc.get(k) != real.get(k)
    ]
    if doc_version != version:
        out.append(f"interface version: README {doc_version} vs ALGORITHM_API_VERSION {version}")
    return out


def test_readme_documents_the_algorithm_interface():
    assert mismatches(README.read_text(encoding="utf-8"), Algorithm, ALGORITHM_API_VERSION) == []


def test_a_change_without_the_doc_is_caught():
    text = README.read_text(encoding="utf-8")

    class Changed(Algorithm):
        def round_hook(self, state):  # a new public member
            pass

        @abstractmethod
        def sync(self, state, selected, weights):  # a hook made required, with a new parameter
            pass

    found = mismatches(text, Changed, ALGORITHM_API_VERSION)
    assert any(f.startswith("round_hook:") for f in found) and any(f.startswith("sync:") for f in found)
    assert mismatches(text, Algorithm, ALGORITHM_API_VERSION + 1) == [
        f"interface version: README {ALGORITHM_API_VERSION} vs ALGORITHM_API_VERSION {ALGORITHM_API_VERSION + 1}"
    ]
