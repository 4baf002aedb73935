"""Round checkpoints (fedrepro.learning.checkpoint): a training interrupted after a checkpoint and run again ends with
exactly the history of an uninterrupted run, for every algorithm of the engine; stale or foreign checkpoints are
ignored; checkpoints load with torch.load(weights_only=True)."""

from __future__ import annotations

import pytest
import torch
from learning_helpers import mlp

from fedrepro.learning import engine
from fedrepro.learning.checkpoint import Checkpointer, fingerprint, pack, restore
from fedrepro.papers.adaped.experiments.fl_training import ALGORITHMS, build_algorithm

pytestmark = pytest.mark.usefixtures("one_thread")

DP = {"clip": 1.0, "noise_multiplier": 0.3}
OPTIONS = {
    "fedavg": {"dp": DP},
    "adaped": {"dp_mu": DP, "dp_psi": DP},
    "fedavg_ft": {"ft_steps": 2},
    "dp_fedavg_server": {"server_dp": {"clip": 1.0, "noise_multiplier": 0.5}},
}
KW = dict(batch_size=5, lr=0.1, rounds=6, tau=2, clients_per_round=3, seed=4, eval_every=2)


class Killed(Exception):
    pass


def _kill_at(round_):
    def cb(info):
        if info["round"] == round_:
            raise Killed

    return cb


@pytest.fixture(scope="module")
def blobs(blobs_factory):
    return blobs_factory(n_clients=5, seed=1, n_train=30, n_test=10)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_interrupted_training_resumes_to_the_same_history(blobs, tmp_path, name):
    try:
        algo = lambda: build_algorithm(name, OPTIONS.get(name, {}), 1e-4)  # noqa: E731
        algo()
    except Exception as exc:  # an algorithm that needs options this test does not know
        pytest.fail(f"{name}: add its options to OPTIONS ({exc})")
    full = engine.train(algo(), blobs, mlp, **KW)
    ck = Checkpointer(tmp_path / "c.pt", fingerprint({"name": name}), every=2)
    with pytest.raises(Killed):  # killed in round 5: the checkpoint of round 4 survives
        engine.train(algo(), blobs, mlp, **KW, checkpoint=ck, callback=_kill_at(5))
    assert torch.load(ck.path, weights_only=True)["round"] == 4
    rounds_run = []
    resumed = engine.train(algo(), blobs, mlp, **KW, checkpoint=ck, callback=lambda i: rounds_run.append(i["round"]))
    assert rounds_run == [5, 6]  # only the missing rounds ran
    assert resumed == full
    again = engine.train(algo(), blobs, mlp, **KW, checkpoint=ck)  # a finished checkpoint returns the history
    assert again == full


def _fedhdp_algorithms():
    import numpy as np

    from fedrepro.learning.dp_fedavg_adaptive import DPFedAvgAdaptive
    from fedrepro.papers.fedhdp.fedhdp import FedHDP
    from fedrepro.papers.fedhdp.hdp_fedavg import HDPFedAvg

    private = np.array([True, False, True, True, False])
    clip = {"init": 0.5, "quantile": 0.5, "lr": 0.2, "count_std": 0.3}
    return {
        "fedhdp": lambda: FedHDP(private=private, r=0.1, noise_multiplier=0.4, clip=clip, lams=[0.1, 1.0]),
        "hdp_fedavg": lambda: HDPFedAvg(private=private, noise_multiplier=0.4, clip=clip, lams=[0.5]),
        "dp_fedavg_adaptive": lambda: DPFedAvgAdaptive(noise_multiplier=0.4, clip=clip, lams=[0.5]),
    }


@pytest.mark.parametrize("name", ["fedhdp", "hdp_fedavg", "dp_fedavg_adaptive"])
def test_fedhdp_algorithms_resume_to_the_same_history_and_models(blobs, tmp_path, name):
    algo = _fedhdp_algorithms()[name]
    ref = algo()
    full = engine.train(ref, blobs, mlp, **KW)
    ck = Checkpointer(tmp_path / "c.pt", fingerprint({"name": name}), every=2)
    with pytest.raises(Killed):
        engine.train(algo(), blobs, mlp, **KW, checkpoint=ck, callback=_kill_at(3))
    resumed_algo = algo()
    assert engine.train(resumed_algo, blobs, mlp, **KW, checkpoint=ck) == full
    want, got = ref.final_models(), resumed_algo.final_models()  # the experiment evaluates these afterwards
    for k in want["global"]:
        assert torch.equal(want["global"][k], got["global"][k])
    for a, b in zip(want["personal"], got["personal"]):
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert resumed_algo.state.clip == ref.state.clip


def test_stale_fingerprint_is_ignored(blobs, tmp_path):
    algo = lambda: build_algorithm("fedavg", {}, 1e-4)  # noqa: E731
    other = Checkpointer(tmp_path / "c.pt", fingerprint({"lr": 0.5}), every=1)
    engine.train(algo(), blobs, mlp, **{**KW, "rounds": 2}, checkpoint=other)
    fresh = engine.train(algo(), blobs, mlp, **KW)
    ck = Checkpointer(tmp_path / "c.pt", fingerprint({"lr": 0.1}), every=2)
    assert ck.load() is None
    assert engine.train(algo(), blobs, mlp, **KW, checkpoint=ck) == fresh
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    assert Checkpointer(tmp_path / "bad.pt", "x").load() is None


def test_a_checkpoint_made_by_other_code_is_ignored(blobs, tmp_path, monkeypatch, capsys):
    import torch

    from fedrepro import provenance

    algo = lambda: build_algorithm("fedavg", {}, 1e-4)  # noqa: E731
    ck = Checkpointer(tmp_path / "c.pt", fingerprint({"lr": 0.1}), every=1)
    engine.train(algo(), blobs, mlp, **{**KW, "rounds": 2}, checkpoint=ck)
    saved = torch.load(tmp_path / "c.pt", weights_only=True)
    assert saved["code"]["learning/engine.py"] == provenance.loaded_code()["learning/engine.py"]
    assert ck.load() is not None
    monkeypatch.setitem(provenance._LOADED, "learning/engine.py", "0" * 16)  # as if it read otherwise now
    assert ck.load() is None
    assert "was made by other code (src/fedrepro/learning/engine.py changed)" in capsys.readouterr().out


def test_pack_restore_round_trip():
    from dataclasses import dataclass, field

    @dataclass
    class Inner:
        a: torch.Tensor
        xs: list = field(default_factory=list)

    gen = torch.Generator().manual_seed(3)
    gen_state = gen.get_state()
    torch.randn(3, generator=gen)
    state = {
        "t": torch.arange(3.0),
        "n": 2,
        "none": None,
        "pair": (1.5, "s"),
        "gen": gen,
        "inner": [{"w": torch.ones(2)}],
    }
    packed = pack(state)
    torch.save(packed, "/dev/null")  # only tensors and plain containers
    gen.set_state(gen_state)
    back = restore({"gen": gen}, packed)
    assert torch.equal(back["t"], state["t"]) and back["n"] == 2 and back["none"] is None
    assert back["pair"] == (1.5, "s") and back["gen"] is gen
    assert torch.equal(
        torch.randn(3, generator=gen),
        torch.randn(3, generator=torch.Generator().set_state(packed["__dict__"][4][1]["__generator__"])),
    )
    with pytest.raises(TypeError):
        pack(object())
    with pytest.raises(TypeError):
        pack(Inner(torch.zeros(1), [object()]))


def test_a_release_resumes_with_its_clip_norm(blobs, tmp_path):
    """A protocol's release of a method's messages (fedrepro.learning.engine.MessageRelease) keeps state across rounds
    (FedHDP's adaptive clip norm): the checkpoint holds it, so a killed run resumes to the same history."""
    import numpy as np

    from fedrepro.learning.adaptive_clip import AdaptiveClip
    from fedrepro.learning.fedavg import FedAvg
    from fedrepro.papers.fedhdp.hdp_fedavg import HDPFedAvgRelease

    class Sends(FedAvg):
        def client_message(self, state, selected):
            return {k: v - state.global_params[k] for k, v in state.local.items()}

        def server_update(self, state, selected, released):
            state.global_params = {k: w + released[k] for k, w in state.global_params.items()}

    def release():
        clip = AdaptiveClip(0.5, count_std=0.3)
        return HDPFedAvgRelease(torch.from_numpy(np.array([True, False, True, True, False])), 0.4, clip, clip.init)

    full = engine.train(Sends(), blobs, mlp, **KW, release=release())
    assert len({h["clip"] for h in full}) > 1  # the norm moves
    ck = Checkpointer(tmp_path / "c.pt", fingerprint({"name": "released"}), every=2)
    with pytest.raises(Killed):
        engine.train(Sends(), blobs, mlp, **KW, checkpoint=ck, callback=_kill_at(3), release=release())
    assert engine.train(Sends(), blobs, mlp, **KW, checkpoint=ck, release=release()) == full


def test_a_method_that_diverged_is_not_trained_further_and_resumes_to_the_same_history(blobs, tmp_path):
    """Server noise beyond float32's range makes DP-FedAvg's global model inf in round 1: from then on no round can
    change it (FedAvg.diverged), so the engine trains no further, keeps evaluating (every test row a miss: an inf
    model predicts nothing) and says so once; killed after it, the run resumes to the same history."""
    from fedrepro.learning.dp_fedavg import DPFedAvgServer

    class Counted(DPFedAvgServer):
        steps = 0

        def local_step(self, state, x, y, selected, lr):
            Counted.steps += 1
            return super().local_step(state, x, y, selected, lr)

    def algo():
        return Counted(server_dp={"clip": 1.0, "noise_multiplier": 1e39})

    said = []
    full = engine.train(algo(), blobs, mlp, **KW, callback=said.append)
    assert Counted.steps == KW["tau"]  # round 1 only (the old loop trained all 6 rounds of the NaN model)
    assert [i["round"] for i in said if i.get("diverged")] == [1]
    losses = [x for h in full for x in h["round_losses"]]
    assert len(losses) == KW["rounds"] and all(x != x for x in losses[1:])  # NaN from round 2 on
    assert [h["test_acc"] for h in full] == [0.0] * len(full) and [h["round"] for h in full] == [2, 4, 6]
    ck = Checkpointer(tmp_path / "c.pt", fingerprint({"name": "diverges"}), every=2)
    with pytest.raises(Killed):
        engine.train(algo(), blobs, mlp, **KW, checkpoint=ck, callback=_kill_at(5))
    Counted.steps = 0
    resumed = engine.train(algo(), blobs, mlp, **KW, checkpoint=ck)
    assert Counted.steps == 0 and str(resumed) == str(full)  # str: NaN != NaN, the same text
