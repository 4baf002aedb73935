"""fedrepro.provenance: what a run records of where it came from (issue #27)."""

import sys

import pytest

import fedrepro
from fedrepro import provenance


def test_params_digest_reads_numbers_by_value():
    assert provenance.params_digest({"r": 0, "g": {"mu": [1, 2]}}) == provenance.params_digest(
        {"r": 0.0, "g": {"mu": [1.0, 2.0]}}
    )
    assert provenance.params_digest({"r": 0}) != provenance.params_digest({"r": 0.5})


def test_code_version_outside_a_git_checkout_is_the_package_version(tmp_path, monkeypatch):
    fake = tmp_path / "src" / "fedrepro" / "__init__.py"
    fake.parent.mkdir(parents=True)
    fake.touch()
    monkeypatch.setattr(fedrepro, "__file__", str(fake))
    provenance.code_version.cache_clear()
    try:
        assert provenance.code_version() == f"fedrepro {fedrepro.__version__}"
    finally:
        provenance.code_version.cache_clear()
    assert provenance.code_version()  # this checkout: git describe, or the package version


def test_machine_text_says_threads_cpus_and_gpus_of_the_record():
    machine_text = provenance.machine_text
    assert machine_text({"cpu": "X", "torch_threads": 1, "cpus_allowed": 2}) == "X (1 thread of 2 CPUs)"
    assert machine_text({"cpu": "X", "torch_threads": 4, "cpus_allowed": 16, "gpus": ["H100"]}) == (
        "X (4 threads of 16 CPUs, H100)"
    )
    assert machine_text({"cpu": "X", "torch_threads": None, "cpus_allowed": 2}) == "X (2 CPUs)"  # no torch
    assert machine_text(provenance.machine()).startswith(provenance.machine()["cpu"])


def test_input_digests_are_small_and_deterministic():
    a = provenance.input_digests({"mnist": [("b", "2"), ("a", "1")]}, {"p": "abc"})
    b = provenance.input_digests({"mnist": [("a", "1"), ("b", "2")]}, {"p": "abc"})
    assert a == b == {"datasets": {"mnist": {"a": "1", "b": "2"}}, "partitions": {"p": "abc"}}


def test_misplaced_names_what_the_place_contradicts_and_ignores_what_is_absent():
    place = {"paper": "adaped", "exp": "fig1a", "scale": "paper", "seed": "0"}
    assert provenance.misplaced({"experiment": "adaped.fig1a", "scale": "paper", "seed": 0}, place) is None
    assert "'adaped.fig3a'" in provenance.misplaced({"experiment": "adaped.fig3a", "seed": 0}, place)
    assert "seed 1" in provenance.misplaced({"experiment": "adaped.fig1a", "seed": 1}, place)
    assert provenance.misplaced({}, place) is None


def test_code_files_cover_the_package_source_file_by_file():
    files = provenance.code_files()
    assert "provenance.py" in files and "cli.py" in files and all(len(d) == 16 for d in files.values())
    assert not any(f.endswith(".pyc") for f in files)


def _saved(ckpt):
    (ckpt / "round.pt").write_text("state")


ATTEMPT = {"code_version": "abc1234", "started_at": "2026-12-02T00:00:00+00:00"}


def test_a_resume_across_rebuilt_input_data_starts_over(tmp_path, capsys):
    from fedrepro.cli import _checkpoints_made_from

    ckpt = tmp_path / ".checkpoints"
    ckpt.mkdir()
    a = provenance.input_digests({}, {"mnist_m50": "aaa"})
    assert _checkpoints_made_from(ckpt, a, ATTEMPT) == []  # no record yet (nothing saved yet): kept, and gets one
    _saved(ckpt)
    later = {**ATTEMPT, "code_version": "def5678"}
    assert _checkpoints_made_from(ckpt, a, later) == [ATTEMPT]  # the same inputs: resumes, other code or not
    assert (ckpt / "round.pt").is_file() and capsys.readouterr().out == ""
    assert _checkpoints_made_from(ckpt, a, ATTEMPT) == [ATTEMPT, later]  # every attempt is listed
    rebuilt = provenance.input_digests({}, {"mnist_m50": "bbb"})
    assert _checkpoints_made_from(ckpt, rebuilt, ATTEMPT) == []
    out = capsys.readouterr().out
    assert not (ckpt / "round.pt").exists() and out.count("\n") == 1
    assert "checkpoints made from other input data (partition mnist_m50): starting over" in out


def test_a_resume_removes_the_files_a_killed_save_left_and_keeps_the_checkpoints(tmp_path):
    """A SIGKILL during atomic_write leaves ``.NAME.xxxx.tmp`` beside the checkpoint (a forensic sweep's in its
    subdirectory): the next attempt removes them and resumes from the checkpoints."""
    from fedrepro.cli import _checkpoints_made_from

    ckpt = tmp_path / ".checkpoints"
    ckpt.mkdir()
    a = provenance.input_digests({}, {})
    _checkpoints_made_from(ckpt, a, ATTEMPT)
    _saved(ckpt)
    (ckpt / "sweep").mkdir()
    (ckpt / "sweep" / "point.pt").write_text("state")
    leftovers = [ckpt / ".round.pt.k2j4.tmp", ckpt / "sweep" / ".point.pt.x9q1.tmp"]
    for f in leftovers:
        f.write_text("half")
    assert _checkpoints_made_from(ckpt, a, ATTEMPT) == [ATTEMPT]
    assert not any(f.exists() for f in leftovers)
    assert (ckpt / "round.pt").is_file() and (ckpt / "sweep" / "point.pt").is_file()


def test_checkpoints_with_a_record_of_an_older_fedrepro_start_over(tmp_path, capsys):
    from fedrepro.cli import INPUTS_RECORD, _checkpoints_made_from

    ckpt = tmp_path / ".checkpoints"
    ckpt.mkdir()
    _saved(ckpt)
    # the record an older fedrepro wrote: inputs and all of the package's source, no attempts
    (ckpt / INPUTS_RECORD).write_text('{"inputs": {"datasets": {}, "partitions": {}}, "code": {"cli.py": "1"}}')
    _checkpoints_made_from(ckpt, provenance.input_digests({}, {}), ATTEMPT)
    assert not (ckpt / "round.pt").exists()
    assert "checkpoints whose record is unreadable or from an older fedrepro: starting over" in capsys.readouterr().out


def test_checkpoints_without_a_record_start_over(tmp_path, capsys):
    from fedrepro.cli import _checkpoints_made_from

    ckpt = tmp_path / ".checkpoints"
    ckpt.mkdir()
    _saved(ckpt)
    _checkpoints_made_from(ckpt, provenance.input_digests({}, {}), ATTEMPT)
    assert not (ckpt / "round.pt").exists()
    assert "checkpoints with no record of their data: starting over" in capsys.readouterr().out


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A stand-in package of two modules, ``pkg_a`` imported and ``pkg_b`` not, as provenance's source root."""
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "pkg_a.py").write_text("A = 1\n")
    (root / "pkg_b.py").write_text("B = 1\n")
    monkeypatch.setattr(provenance, "_PACKAGE", root.resolve())
    monkeypatch.setattr(provenance, "_LOADED", {})
    monkeypatch.setattr(provenance, "_SEEN", set())
    monkeypatch.syspath_prepend(str(root))
    import pkg_a  # noqa: F401

    yield root
    sys.modules.pop("pkg_a", None)


def test_loaded_code_lists_the_imported_files_only_as_first_seen(package):
    first = provenance.loaded_code()
    assert list(first) == ["pkg_a.py"] and first["pkg_a.py"] == provenance._digest(package / "pkg_a.py")
    (package / "pkg_a.py").write_text("A = 2\n")  # edited after this process imported it
    assert provenance.loaded_code() == first  # what it runs is what it first read
    provenance.inherit_loaded_code({"pkg_b.py": "0" * 16})  # a worker: its parent's files count as its own
    assert provenance.loaded_code() == {**first, "pkg_b.py": "0" * 16}


def test_code_a_checkpoint_was_made_with_is_judged_by_its_own_files(package, capsys):
    made = provenance.loaded_code()
    assert provenance.made_by_this_code(made, "round.pt") and capsys.readouterr().out == ""
    (package / "pkg_b.py").write_text("B = 2\n")  # a file the run never imported: resumes
    assert provenance.made_by_this_code(made, "round.pt")
    # one it did import, changed since (as the next attempt, a fresh process, reads it)
    provenance._LOADED.clear()  # as a fresh process
    provenance._SEEN.clear()
    (package / "pkg_a.py").write_text("A = 2\n")
    assert not provenance.made_by_this_code(made, "round.pt")
    assert (
        capsys.readouterr().out
        == "[fedrepro] round.pt: was made by other code (src/fedrepro/pkg_a.py changed): starting it over\n"
    )
    (package / "pkg_a.py").unlink()  # gone counts as changed
    provenance._LOADED.clear()  # as a fresh process
    provenance._SEEN.clear()
    assert provenance.changed_code(made) == ["pkg_a.py"]
    assert not provenance.made_by_this_code({}, "round.pt")  # no record: an older fedrepro's
    assert "carries no record of its code" in capsys.readouterr().out


def test_changed_code_text_names_three_files_and_counts_the_rest():
    assert provenance.changed_code_text(["a.py"]) == "src/fedrepro/a.py changed"
    assert provenance.changed_code_text(["a.py", "b.py", "c.py", "d.py", "e.py"]) == (
        "src/fedrepro/a.py, src/fedrepro/b.py, src/fedrepro/c.py and 2 more changed"
    )
