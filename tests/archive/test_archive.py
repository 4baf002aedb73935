"""The results archive (fedrepro.archive): what may be added, that a fresh checkout can verify, replay and restore it,
and that every edit of an archived file, every forged history and every parameter changed since is caught."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tiny_fedhdp import EXP, archived, cfg_of, run_dir, write_paper

from fedrepro.archive import ops, replay
from fedrepro.cli import main
from fedrepro.config import load_global
from fedrepro.data.stamps import sha256_of
from fedrepro.errors import FedreproError


def rehash(d: Path, name: str) -> None:
    """Write a file's new sha256 and size into the manifest, as a forger would."""
    m = json.loads((d / "manifest.json").read_text())
    m["files"][name] = {"sha256": sha256_of(d / name), "bytes": (d / name).stat().st_size}
    (d / "manifest.json").write_text(json.dumps(m))


def add_both(base: Path, sets: list[str]) -> None:
    assert main(["archive", "add", str(run_dir(base, 0)), str(run_dir(base, 1)), *sets]) == 0


def test_add_keeps_the_runs_files_and_a_manifest(world, capsys):
    base, sets = world
    add_both(base, sets)
    d = archived(base, 0)
    assert sorted(p.name for p in d.iterdir()) == [
        "arrays.npz",
        "config.yaml",
        "history.parquet",
        "manifest.json",
        "metrics.json",
    ]
    m = json.loads((d / "manifest.json").read_text())
    assert m["files"]["metrics.json"]["sha256"] == sha256_of(run_dir(base, 0) / "metrics.json")
    assert m["made"]["code_version"] == "0123abc" and m["made"]["machine"]["cpu"] and m["made"]["started_at"]
    assert m["params_digest"] and "mnist" in m["inputs"]["datasets"]
    assert m["kind_revision"] == json.loads((d / "metrics.json").read_text())["kind_revision"] == 1
    # adding the same run again changes nothing
    capsys.readouterr()
    assert main(["archive", "add", str(run_dir(base, 0)), *sets]) == 0
    assert "already archived" in capsys.readouterr().out
    out = ops.list_text(cfg_of(sets))
    assert "fedhdp.tiny: paper seeds [0, 1]; complete: the default run restores it" in out
    assert ops.restorable(cfg_of(sets)) == {EXP: [0, 1]}


def test_a_resumed_runs_earlier_attempts_are_in_its_manifest_and_listing(world):
    base, sets = world
    metrics = run_dir(base, 0) / "metrics.json"
    doc = json.loads(metrics.read_text())
    doc["earlier_attempts"] = [{"code_version": "0001aaa", "started_at": "2026-12-01T00:00:00+00:00"}]
    metrics.write_text(json.dumps(doc))
    add_both(base, sets)
    assert (
        json.loads((archived(base, 0) / "manifest.json").read_text())["made"]["earlier_attempts"]
        == (doc["earlier_attempts"])
    )
    assert "earlier_attempts" not in json.loads((archived(base, 1) / "manifest.json").read_text())["made"]
    out = ops.list_text(cfg_of(sets))
    assert "0123abc (resumed from checkpoints of 0001aaa)" in out
    assert out.count("resumed from") == 1


def refused(capsys, *args) -> str:
    assert main(["archive", "add", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line, no traceback
    return err


def test_add_refuses_what_is_not_a_finished_paper_scale_run_with_provenance(world, capsys, tmp_path):
    base, sets = world
    run = run_dir(base, 0)
    assert "no metrics.json" in refused(capsys, str(base / "nothing"), *sets)

    def variant(edit) -> Path:
        d = tmp_path / f"v{len(list(tmp_path.glob('v*')))}" / "seed0"
        shutil.copytree(run, d)
        edit(d)
        return d

    def metrics(**changes):
        def edit(d):
            doc = json.loads((d / "metrics.json").read_text())
            for k, v in changes.items():
                if v is None:
                    doc.pop(k)
                else:
                    doc[k] = v
            (d / "metrics.json").write_text(json.dumps(doc))

        return edit

    cases = [
        (metrics(scale="quick", effective_scale="quick"), "a quick-scale run"),
        (metrics(effective_scale="custom"), "a custom-scale run"),
        (metrics(code_version="0123abc-dirty"), "made from code no commit holds"),
        (metrics(machine=None), "does not record the machine it ran on"),
        (metrics(params_digest="0000"), "config.yaml's parameters do not digest"),
        (lambda d: (d / ".checkpoints").mkdir(), "still holds .checkpoints"),
        (lambda d: (d / "history.parquet").unlink(), "history.parquet missing"),
    ]
    for edit, why in cases:
        assert why in refused(capsys, str(variant(edit)), *sets), why
    nan = variant(lambda d: None)
    text = (nan / "metrics.json").read_text().replace('"n_clients": 2000', '"n_clients": NaN', 1)
    (nan / "metrics.json").write_text(text)
    assert "metrics not finite: n_clients" in refused(capsys, str(nan), *sets)
    # made under other parameters than the config now gives
    other = write_paper(tmp_path / "other.yaml", lr=0.2)
    assert "stale: made under other parameters" in refused(
        capsys, str(run), *sets[:-2], "--config-set", f"papers.fedhdp={other}"
    )
    assert not (base / "archive").exists() or not list((base / "archive").rglob("manifest.json"))


def test_verify_and_replay_pass_then_catch_every_edit(world, capsys):
    base, sets = world
    add_both(base, sets)
    assert main(["archive", "verify", "--replay", "2", *sets]) == 0
    out = capsys.readouterr().out
    assert "ok   fedhdp.tiny seed 0: the first 2 rounds of 2 engine runs replay" in out

    d = archived(base, 0)
    doc = json.loads((d / "metrics.json").read_text())
    doc["metrics"]["n_clients"] = 2001  # one number changed
    (d / "metrics.json").write_text(json.dumps(doc))
    assert main(["archive", "verify", *sets]) == 1
    assert f"FAIL {d / 'metrics.json'}: sha256" in capsys.readouterr().out

    shutil.copy(run_dir(base, 0) / "metrics.json", d / "metrics.json")
    raw = bytearray((d / "history.parquet").read_bytes())
    raw[len(raw) // 2] ^= 0x01  # one byte flipped
    (d / "history.parquet").write_bytes(bytes(raw))
    assert main(["archive", "verify", *sets]) == 1
    assert f"FAIL {d / 'history.parquet'}: sha256" in capsys.readouterr().out


def test_verify_skips_the_replay_of_a_run_whose_data_is_not_here(world, capsys, monkeypatch):
    """A clone without the data of an archived experiment (the LEAF sample without ../shared) still verifies its
    hashes and configuration; only the replay, which trains on the data, is skipped, saying what to fetch."""
    base, sets = world
    add_both(base, sets)
    monkeypatch.setattr(ops, "is_available", lambda cfg, dataset: dataset != "mnist")
    assert main(["archive", "verify", "--replay", "2", *sets]) == 0
    out = capsys.readouterr().out
    assert "ok   fedhdp.tiny seed 0" in out
    assert "skip fedhdp.tiny: its data is not here to replay from (mnist; `python -m fedrepro data fetch mnist`)" in out
    assert "rounds of" not in out


def test_replay_catches_a_forged_history_whose_manifest_was_rehashed(world, capsys):
    """A forger who edits a loss and writes the new sha256 into the manifest passes the hash check, not the replay."""
    base, sets = world
    add_both(base, sets)
    d = archived(base, 0)
    h = pd.read_parquet(d / "history.parquet")
    h.at[0, "round_losses"] = [x * 0.9 for x in h.at[0, "round_losses"]]
    h.to_parquet(d / "history.parquet", index=False)
    rehash(d, "history.parquet")
    assert main(["archive", "verify", *sets]) == 0  # the hashes agree
    assert main(["archive", "verify", "--replay", "2", *sets]) == 1
    assert "round 1 train loss" in capsys.readouterr().out


def test_replay_catches_a_run_attributed_to_another_seed(world, capsys):
    """Seed 1's run archived as seed 0 (metrics, manifest and place all saying seed 0)."""
    base, sets = world
    add_both(base, sets)
    d0, d1 = archived(base, 0), archived(base, 1)
    shutil.copy(d1 / "history.parquet", d0 / "history.parquet")
    rehash(d0, "history.parquet")
    assert main(["archive", "verify", "--replay", "1", *sets]) == 1
    assert f"FAIL {d0 / 'history.parquet'}" in capsys.readouterr().out


def test_a_parameter_changed_since_makes_the_archive_stale(world, capsys, tmp_path):
    base, sets = world
    add_both(base, sets)
    changed = write_paper(tmp_path / "changed.yaml", rounds=4)
    now = [*sets[:-2], "--config-set", f"papers.fedhdp={changed}"]
    out = ops.list_text(cfg_of(now))
    assert "seed 0: stale: made under other parameters" in out and "rounds: 3 -> 4" in out
    assert ops.restorable(cfg_of(now)) == {}
    assert main(["archive", "restore", "--experiment", EXP, "--seed", "0", "--out", str(tmp_path / "r"), *now]) == 2
    assert "is stale, not restored" in capsys.readouterr().err
    assert main(["archive", "verify", *now]) == 0  # stale is reported, not a failure
    assert "stale fedhdp.tiny seed 0" in capsys.readouterr().out


def test_restore_copies_the_run_and_says_where_it_came_from(world, tmp_path):
    base, sets = world
    add_both(base, sets)
    out = tmp_path / "restored"
    assert main(["archive", "restore", "--experiment", EXP, "--seed", "1", "--out", str(out), *sets]) == 0
    for f in ("metrics.json", "history.parquet", "config.yaml", "arrays.npz"):
        assert (out / f).read_bytes() == (run_dir(base, 1) / f).read_bytes()
    src = json.loads((out / "archived.json").read_text())
    assert src["machine"]["cpu"] and src["code_version"] == "0123abc" and src["started_at"]
    # a damaged archived run is not restored
    (archived(base, 1) / "config.yaml").write_text("params: {}\n")
    assert main(["archive", "restore", "--experiment", EXP, "--seed", "1", "--out", str(tmp_path / "x"), *sets]) == 2


def test_the_budget_is_checked(world, capsys):
    base, sets = world
    small = [*sets, "--config-set", "archive.budget_mb.run=0.001"]
    assert "over the per-run budget" in refused(capsys, str(run_dir(base, 0)), *small)


def test_the_repositorys_archive_is_sound_and_within_budget(capsys):
    """The archive committed in this repository: every file as its manifest says, within the budget."""
    assert ops.verify(load_global(), out=print) == 0


def _losses(values: list[list[float]]) -> dict[tuple, np.ndarray]:
    return {(("method", f"m{i}"),): np.asarray(v) for i, v in enumerate(values)}


REPLAYED = [[2.2895, 2.2640], [2.3859, 2.4081], [2.2925, 2.2627], [2.2982, 2.2878]]


def test_compare_passes_one_loss_an_unstable_method_drifted_on_another_cpu():
    """adaped.table4_femnist_sample seed 0, Intel-made, AMD-replayed: pFedMe's round 2 is 3.6e-4 off, the rest agree."""
    archived = [list(v) for v in REPLAYED]
    archived[1][1] *= 1 + 3.6e-4
    result = replay.compare(_losses(archived), _losses(REPLAYED), 2, "h.parquet")
    assert result.problems == []
    assert result.max_relative_difference == pytest.approx(3.6e-4, rel=1e-3)
    assert result.median_relative_difference == 0.0


def test_compare_fails_a_run_whose_every_loss_is_a_little_off():
    """Another seed's run: each loss within the per-loss bound, their median over REPLAY_MEDIAN_RTOL."""
    archived = [[x * (1 + 5e-4) for x in v] for v in REPLAYED]
    problems = replay.compare(_losses(archived), _losses(REPLAYED), 2, "h.parquet").problems
    assert len(problems) == 1
    assert "h.parquet: the 8 train losses differ from the replay's by a median relative 5.0e-04" in problems[0]


def test_compare_fails_one_loss_edited_past_the_bound():
    archived = [list(v) for v in REPLAYED]
    archived[2][0] *= 1 + 2e-2
    problems = replay.compare(_losses(archived), _losses(REPLAYED), 2, "h.parquet").problems
    assert problems == [
        "h.parquet: method=m2: round 1 train loss 2.33835 archived, 2.2925 replayed (relative 2.0e-02, over 0.01): "
        "not what this code makes from this experiment's parameters, inputs and seed"
    ]


def test_on_another_cpu_the_losses_are_judged_by_their_median_only():
    """adaped.table1_fmnist's Intel-made seeds replayed on an AMD EPYC: pFedMe's losses up to 1.3e-1 off, the median
    ~0. Made and replayed on one CPU model a loss 2e-2 off still fails; on two it passes, saying so; another seed's
    run (every loss a little off) fails on either."""
    archived = [list(v) for v in REPLAYED]
    archived[2][0] *= 1 + 2e-2
    same = replay.compare(_losses(archived), _losses(REPLAYED), 2, "h.parquet", "Intel Xeon", "Intel Xeon")
    assert len(same.problems) == 1 and "over 0.01" in same.problems[0] and same.other_cpu is None
    other = replay.compare(_losses(archived), _losses(REPLAYED), 2, "h.parquet", "Intel Xeon", "AMD EPYC")
    assert other.problems == [] and other.other_cpu == "made on Intel Xeon, replayed on AMD EPYC"
    assert other.max_relative_difference == pytest.approx(2e-2, rel=1e-3)
    another_seed = [[x * (1 + 5e-4) for x in v] for v in REPLAYED]
    problems = replay.compare(_losses(another_seed), _losses(REPLAYED), 2, "h", "Intel Xeon", "AMD EPYC").problems
    assert len(problems) == 1 and "median relative 5.0e-04" in problems[0]


def test_compare_holds_a_diverged_loss_to_the_same_non_finite_value():
    """A NaN or infinite loss replays only as itself: against a number (or NaN against inf) it fails."""
    archived = [list(v) for v in REPLAYED]
    replayed = [list(v) for v in REPLAYED]
    archived[0][1] = replayed[0][1] = float("nan")
    archived[3][1] = replayed[3][1] = float("inf")
    assert replay.compare(_losses(archived), _losses(replayed), 2, "h.parquet").problems == []
    for value in (float("nan"), float("inf"), -float("inf")):
        forged = [list(v) for v in archived]
        forged[1][0] = value
        problems = replay.compare(_losses(forged), _losses(replayed), 2, "h.parquet").problems
        assert any("method=m1: round 1 train loss" in p for p in problems), value
    forged = [list(v) for v in archived]
    forged[0][1] = float("inf")
    assert replay.compare(_losses(forged), _losses(replayed), 2, "h.parquet").problems


def test_traces_keep_each_privacy_level_apart_and_refuse_runs_no_column_tells_apart():
    """Table 2's history: one run per method and epsilon (column ``epsilon``), each its own trace; a history with two
    runs under one key is an error, not one trace of both runs' losses interleaved."""
    rows = [
        {"method": "dp_adaped", "lr_grid": 0.1, "epsilon": e, "round": r, "round_losses": [e + r, e + r + 0.5]}
        for r in (2, 4)
        for e in (3.35, 13.16)
    ]
    got = replay.traces(pd.DataFrame(rows))
    assert {dict(k)["epsilon"]: v.tolist() for k, v in got.items()} == {
        3.35: [5.35, 5.85, 7.35, 7.85],
        13.16: [15.16, 15.66, 17.16, 17.66],
    }
    with pytest.raises(FedreproError, match=r"method=dp_adaped, lr_grid=0.1: round 2 twice"):
        replay.traces(pd.DataFrame(rows).rename(columns={"epsilon": "level"}))


def test_add_warns_of_a_ci_row_whose_check_fails_in_the_run(tmp_path):
    """histograms.x_synthetic seed 1 was archived failing its CI row's check (a float32 rise of the Lloyd objective):
    the CI replication check failed only once all five seeds made the default run restore them. ``archive add``
    names such a row at once."""
    from fedrepro.archive.store import Entry, read_manifest

    src = Path(__file__).resolve().parents[2] / "archive" / "histograms" / "x_synthetic" / "paper" / "seed0"
    d = tmp_path / "seed0"
    shutil.copytree(src, d)
    cfg = load_global()
    entry = Entry(d, read_manifest(d))
    assert ops.failing_ci_checks(cfg, entry) == []
    doc = json.loads((d / "metrics.json").read_text())
    doc["checks"]["lloyd_objective_monotone"].update(passed=False, detail="largest increase 9.3e-09")
    (d / "metrics.json").write_text(json.dumps(doc))
    assert ops.failing_ci_checks(cfg, entry) == [
        "histograms.X.syn.lloyd_monotone: check lloyd_objective_monotone fails in seed 0: largest increase 9.3e-09"
    ]


@pytest.mark.parametrize("results", ["results", "/abs/out/results"])
def test_the_workflow_restores_an_archived_name_only_under_its_own_paper(results):
    """Rule restore_archived's constraints, compiled as Snakemake compiles them: ppsgd.forensic_fig1a archived must
    not make adaped.forensic_fig1a (trained by run_experiment) look restorable, nor ppsgd.fig1a."""
    import re

    from snakemake.io import regex_from_filepattern, update_wildcard_constraints

    from fedrepro import paths

    cfg = {"results_dir": results, "figures_dir": "figures", "data": {"dir": "data"}}
    archived = {"ppsgd.forensic_fig1a": [0], "adaped.table2_mnist": [0, 1], "fedhdp.noniid_mnist": [0]}
    constraints = {**ops.restore_constraints(archived), "scale": "paper", "seed": r"\d+"}
    pattern = update_wildcard_constraints(paths.rule_pattern(cfg, "run_file"), constraints, {})
    regex = re.compile(regex_from_filepattern(pattern))

    def restorable(paper: str, exp: str) -> bool:
        return regex.match(f"{results}/{paper}/{exp}/paper/seed0/metrics.json") is not None

    assert restorable("ppsgd", "forensic_fig1a") and restorable("adaped", "table2_mnist")
    assert restorable("fedhdp", "noniid_mnist")
    assert not restorable("adaped", "forensic_fig1a") and not restorable("ppsgd", "table2_mnist")
    assert not restorable("ppsgd", "fig1a") and not restorable("ppsgd", "forensic_fig1a_early")
    assert regex.match(f"{results}/ppsgd/forensic_fig1a/quick/seed0/metrics.json") is None
    nothing = re.compile(
        regex_from_filepattern(
            update_wildcard_constraints(paths.rule_pattern(cfg, "run_file"), ops.restore_constraints({}), {})
        )
    )
    assert nothing.match(f"{results}/ppsgd/forensic_fig1a/paper/seed0/metrics.json") is None
