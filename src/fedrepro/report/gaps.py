"""Collect the `# GAP:` comments of a paper's experiment file: every default chosen where the paper is silent.

The comments live next to the values they explain in config/<paper>.yaml; the report lists them with their key
path (e.g. ``experiments.fig1a.params.delta``) so the choice is visible beside the numbers it affects.
"""

from __future__ import annotations

import re
from pathlib import Path

_KEY = re.compile(r"^(\s*)(?:- )?([A-Za-z0-9_]+):(.*)$")


def gap_comments(path: str | Path) -> list[tuple[str, str, str]]:
    """(key path, value text, gap comment) for every line whose comment starts with 'GAP'."""
    out, stack = [], []  # stack of (indent, key)
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        m = _KEY.match(line)
        if m:
            indent, key = len(m.group(1)), m.group(2)
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, key))
        if "# GAP" not in line:
            continue
        body, comment = line.split("# GAP", 1)
        comment = comment.lstrip(":").strip()
        if m:
            value = body.split(":", 1)[1].strip() if ":" in body else ""
            out.append((".".join(k for _, k in stack), value, comment))
        else:  # a comment on its own line explains the key that follows / encloses it
            out.append((".".join(k for _, k in stack), "", comment))
    return out
