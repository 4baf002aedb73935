"""No path of one particular machine in the project: files are named relative to the project root."""

import re
import subprocess

from fedrepro.config import REPO_ROOT

# absolute paths that only exist on one machine (a home, a work or scratch mount); system package locations such as
# /usr/share/datasets (Debian's dataset packages) and /tmp in examples are fine
MACHINE_PATH = re.compile(r"(?<![\w.])/(work|home|root|scratch|mnt/data|Users)/[\w.-]+")


def machine_paths(lines: dict[str, str]) -> list[str]:
    return [f"{name}: {m.group(0)}" for name, text in lines.items() for m in MACHINE_PATH.finditer(text)]


def test_no_tracked_file_names_a_machine_path():
    files = subprocess.run(
        ["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    texts = {}
    for f in files:
        try:
            texts[f] = (REPO_ROOT / f).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
    texts.pop("tests/test_no_machine_paths.py", None)
    assert machine_paths(texts) == []


def test_the_check_finds_one():
    assert machine_paths({"a.py": "see /work/shared/data/x", "b.md": "../shared/data and /usr/share/datasets"}) == [
        "a.py: /work/shared"
    ]
