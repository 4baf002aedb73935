"""fedrepro.provenance: what a run records of where it came from (issue #27)."""

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


def test_a_resume_across_rebuilt_input_data_starts_over(tmp_path, capsys):
    from fedrepro.cli import _checkpoints_made_from

    ckpt = tmp_path / ".checkpoints"
    ckpt.mkdir()
    code = {"engine.py": "1" * 16}
    a = provenance.input_digests({}, {"mnist_m50": "aaa"})
    _checkpoints_made_from(ckpt, a, code)  # no record yet (nothing saved yet): kept, and gets one
    _saved(ckpt)
    _checkpoints_made_from(ckpt, a, code)  # the same inputs and code: resumes
    assert (ckpt / "round.pt").is_file() and capsys.readouterr().out == ""
    rebuilt = provenance.input_digests({}, {"mnist_m50": "bbb"})
    _checkpoints_made_from(ckpt, rebuilt, code)
    out = capsys.readouterr().out
    assert not (ckpt / "round.pt").exists() and out.count("\n") == 1
    assert "checkpoints made from other input data (partition mnist_m50): starting over" in out


def test_a_resume_across_changed_code_starts_over_naming_the_files(tmp_path, capsys):
    from fedrepro.cli import _checkpoints_made_from

    ckpt = tmp_path / ".checkpoints"
    ckpt.mkdir()
    inputs = provenance.input_digests({}, {"mnist_m50": "aaa"})
    code = {"engine.py": "1" * 16, "learning/batched_mlp.py": "2" * 16}
    _checkpoints_made_from(ckpt, inputs, code)
    _saved(ckpt)
    _checkpoints_made_from(ckpt, inputs, {**code, "learning/batched_mlp.py": "3" * 16})
    out = capsys.readouterr().out
    assert not (ckpt / "round.pt").exists() and out.count("\n") == 1
    assert "made from other code (src/fedrepro/learning/batched_mlp.py changed): starting over" in out


def test_checkpoints_with_a_record_of_an_older_fedrepro_start_over(tmp_path, capsys):
    from fedrepro.cli import INPUTS_RECORD, _checkpoints_made_from

    ckpt = tmp_path / ".checkpoints"
    ckpt.mkdir()
    _saved(ckpt)
    (ckpt / INPUTS_RECORD).write_text('{"datasets": {}, "partitions": {}}')  # inputs only: code unknown
    _checkpoints_made_from(ckpt, provenance.input_digests({}, {}), {"engine.py": "1" * 16})
    assert not (ckpt / "round.pt").exists()
    assert "checkpoints whose record is unreadable or from an older fedrepro: starting over" in capsys.readouterr().out


def test_checkpoints_without_a_record_start_over(tmp_path, capsys):
    from fedrepro.cli import _checkpoints_made_from

    ckpt = tmp_path / ".checkpoints"
    ckpt.mkdir()
    _saved(ckpt)
    _checkpoints_made_from(ckpt, provenance.input_digests({}, {}), {"engine.py": "1" * 16})
    assert not (ckpt / "round.pt").exists()
    assert "checkpoints with no record of their data and code: starting over" in capsys.readouterr().out
