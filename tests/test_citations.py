"""The repository explains itself: every document a comment, docstring, config or registry row of src/, config/ or
workflow/ cites is in the repository. The replication inventories are cited as docs/notes/<paper>.md (they live
there); a bare "notes §7.2" or a path outside the checkout (../shared/...) fails."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("src", "config", "workflow")
SUFFIXES = {".py", ".yaml", ".yml", ".csv", ".tsv", ".smk", ".rst", ".md", ".json", ".html"}

#: a citation of the inventories that does not name its file: "notes §7.2", "notes C8", "(notes section 2.12)",
#: "the notes' reading"; "docs/notes/adaped.md §7.2" passes, and so does the word in other senses ("self.notes")
BARE_NOTES = re.compile(
    r"(?<![/\w.])(?<!its )(?:replication )?notes(?:'|\b)(?!/)"
    r"(?=\s*[(,]?\s*(?:§|section|Sec\.|\d+(?:\.\d+)?\b|[CGE]\d|#|\[derived|derived|defaults|\)|'))"
)
#: the documents beside a checkout that a clone does not have (the offline data mirror is a path, not a citation)
OUTSIDE = re.compile(r"\.\./shared/(?!data\b)|(?<![\w/])shared/(?:notes|papers)/")
NOTES_FILE = re.compile(r"docs/notes/(\w+)\.md")


def offending(text: str) -> list[str]:
    """The citations in ``text`` that point outside the repository or do not name their in-repository file."""
    bad = [m.group(0) for m in BARE_NOTES.finditer(text)] + [m.group(0) for m in OUTSIDE.finditer(text)]
    bad += [m.group(0) for m in NOTES_FILE.finditer(text) if not (ROOT / m.group(0)).is_file()]
    return bad


def _files():
    for top in SCANNED:
        yield from sorted(p for p in (ROOT / top).rglob("*") if p.is_file() and p.suffix in SUFFIXES)
    yield ROOT / "Snakefile"


@pytest.mark.parametrize(
    "text, flagged",
    [
        ("the defaults of notes §7.2", True),
        ("(notes section 2.12)", True),
        ("sample-weighted (notes C8)", True),
        ("the notes' reconstruction drops it", True),
        ("see ../shared/notes/adaped.md §7", True),
        ("see docs/notes/nosuchpaper.md §7", True),
        ("the defaults of docs/notes/adaped.md §7.2", False),
        ("mirror: ../shared/data", False),
        ("self.notes.append(msg)", False),
        ("returns the downloader (its notes).", False),
    ],
)
def test_the_citation_check_flags_what_points_outside(text, flagged):
    assert bool(offending(text)) is flagged, offending(text)


def test_every_cited_document_is_in_the_repository():
    bad = {}
    for path in _files():
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for hit in offending(line):
                bad.setdefault(f"{path.relative_to(ROOT)}:{n}", []).append(hit)
    assert not bad, "citations of documents outside the repository (cite docs/notes/<paper>.md):\n" + "\n".join(
        f"  {where}: {hits}" for where, hits in list(bad.items())[:40]
    )
