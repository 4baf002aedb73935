"""Ditto personalization (Li, Hu, Beirami, Smith, ICML 2021) as a reusable piece of an engine algorithm.

Every client j keeps a personal model v_j beside the global training. Whenever j is sampled, at each of its local
iterations, on the same minibatch as its global-model step (FedHDP Alg. 2, docs/notes/fedhdp.md section 2.5):

    v_j <- v_j - lr_p ( grad f_j(v_j; batch) + lambda_j (v_j - theta^t) ),

anchored at the global model theta^t the client received this round (the global model is untouched by lambda).
v_j starts as the global model the first time j is sampled ("theta_j <- theta^0 only if not yet initialized");
a client never trained is deployed with the current global model (docs/notes/fedhdp.md §7.20: that is what FedHDP's r =
0 rows
show for private clients).

One :class:`Ditto` holds several personal-model sets at once, one per (lambda_private, lambda_nonprivate) pair:
lambda does not change the global model, so one global run serves a whole lambda grid (each set sees exactly the
updates it would see alone). The host algorithm calls :meth:`start_round`, :meth:`step` inside its local step and
:meth:`finish_round` at synchronization; the engine keeps its single round loop. On the MLP formulation, where every
selected client personalizes, the host's own local copies and the personal sets step together (:meth:`lay_beside`,
:meth:`step_with`): they read the same minibatch, so their first layers take one GEMM. Where the engine gives the
clients' input supports (``Net.input_support``) and each set has one lambda for all clients, those first layers are
packed for the round by the clients' supports (batched_mlp.pack_columns): the products leave out the inputs a
client's examples never make nonzero. With the training data on the net (``Net.train_data``), the steps then look
each minibatch up in the clients' training rows, taken once a round, and keep the round's changes to the first
layers as coefficients of those rows where they are few (batched_mlp.look_up_rows). Where the sets cannot step
together (FedHDP at r = 0 personalizes only its opt-out clients), the host's copies are packed alone and the personal
sets step on their own. The host reads its local copies through :meth:`DittoAlgorithmMixin.local_models`, which
unpacks them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from fedrepro.learning import batched_mlp
from fedrepro.learning.engine import client_sgd
from fedrepro.learning.net import Net, Params, expand, param_bytes, put, rows_of, stack, take, write_rows


@dataclass
class DittoState:
    personal: list[Params]  # one stacked (n_clients, ...) set per lambda pair
    initialized: Tensor  # (n_clients,) bool: v_j has been set from a received global model
    trained: Tensor  # (n_clients,) bool: v_j has taken at least one personal step
    anchor: Params | None = None  # the global model received this round
    active: Tensor | None = None  # (K,) bool: which selected clients personalize this round
    lams: list[Tensor] = field(default_factory=list)  # per set, (n_active,) lambda of each active client
    working: list[Params] = field(default_factory=list)  # per set, the active clients' v_j during the round
    working_idx: Tensor | None = None  # the client ids of ``working``'s rows
    packed: batched_mlp.Packed | None = None  # the round's first layers packed by the clients' input supports


class Ditto:
    """Personal models for ``lams``: a list of (lambda_private, lambda_nonprivate) pairs, or of single lambdas
    (used for both groups). ``private``: (n_clients,) bool of the private clients (None: all the same group)."""

    def __init__(self, lams: Sequence[float | Sequence[float]], weight_decay: float = 0.0, lr_scale: float = 1.0):
        pairs = []
        for lam in lams:
            p, np_ = (lam, lam) if isinstance(lam, (int, float)) else tuple(lam)
            if not p >= 0 or not np_ >= 0:
                raise ValueError(f"Ditto lambdas must be >= 0, got {lam}")
            pairs.append((float(p), float(np_)))
        if not pairs:
            raise ValueError("Ditto needs at least one lambda")
        self.pairs = pairs
        self.weight_decay = weight_decay
        self.lr_scale = lr_scale  # eta_p = lr_scale * eta (FedHDP Table 7: eta_p = eta)

    def init_state(self, global_params: Params, n_clients: int) -> DittoState:
        device = next(iter(global_params.values())).device
        return DittoState(
            [stack(global_params, n_clients) for _ in self.pairs],
            torch.zeros(n_clients, dtype=torch.bool, device=device),
            torch.zeros(n_clients, dtype=torch.bool, device=device),
        )

    def start_round(
        self,
        st: DittoState,
        global_params: Params,
        selected: Tensor,
        private: Tensor | None,
        active: Tensor | None = None,
    ) -> None:
        """Broadcast: first-time clients copy the global model; record the anchor and each client's lambda.
        ``active`` (K,) bool: clients that personalize this round (default all selected)."""
        st.anchor = global_params
        st.active = torch.ones(len(selected), dtype=torch.bool, device=selected.device) if active is None else active
        fresh = selected[st.active & ~st.initialized[selected]]
        if len(fresh):
            for v in st.personal:
                put(v, fresh, stack(global_params, len(fresh)))
            st.initialized[fresh] = True
        is_p = (
            private[selected]
            if private is not None
            else torch.zeros(len(selected), dtype=torch.bool, device=selected.device)
        )
        dtype = next(iter(global_params.values())).dtype
        st.lams = [
            torch.where(
                is_p,
                torch.tensor(lp, dtype=dtype, device=selected.device),
                torch.tensor(lnp, dtype=dtype, device=selected.device),
            )[st.active]
            for lp, lnp in self.pairs
        ]
        # the active clients' personal models, gathered once for the round's local steps, scattered back at its end
        idx = selected[st.active]
        st.working = [take(v, idx) for v in st.personal] if len(idx) else []
        st.working_idx = idx

    def step(self, st: DittoState, net: Net, x: Tensor, y: Tensor, selected: Tensor, lr: float) -> None:
        """One personal step of every active selected client, for every lambda set, on the minibatch (x, y)."""
        if not st.working:
            return
        xa, ya = (x, y) if bool(st.active.all()) else (x[st.active], y[st.active])
        lr_p = self.lr_scale * lr
        st.working = [
            client_sgd(net, v, xa, ya, lr_p, self.weight_decay, prox=(lam, st.anchor), inplace=True)[0]
            for v, lam in zip(st.working, st.lams)
        ]

    def lay_beside(self, st: DittoState, net: Net, local: Params, selected: Tensor) -> Params:
        """``local`` (this round's copies of the global model, one per ``selected`` client) with its first layer and
        the personal sets' laid side by side (batched_mlp.side_by_side), where :meth:`step_with` can then step them
        together: the MLP formulation, every selected client personalizing, eta_p = eta. Where the engine gives the
        clients' input supports, their first layers are packed by them for the round (with one lambda a set); where
        the sets cannot step together, the copies' first layer alone (FedHDP at r = 0: only its opt-out clients
        personalize). Call after :meth:`start_round`; use the returned copies."""
        together = self.together(st, net)
        batched = net.formulation is batched_mlp and net.vectorize
        support = net.input_support() if batched else None
        if not together and support is None:
            return local
        # alone, the copies (this round's own tensors) are packed where they lie: one set is side by side already
        laid = batched_mlp.side_by_side(net.model, [local, *st.working]) if together else [local]
        st.working = laid[1:] if together else st.working
        if support is not None and all(batched_mlp.one_lambda(lam) is not None for lam in st.lams if together):
            st.packed = batched_mlp.pack_columns(net.model, laid, support[selected])
        if st.packed is not None and net.train_data is not None:  # steps look their minibatches up: step_with
            x, _ = net.train_data.gather(net.train_data.client_rows(selected.cpu().numpy()))
            batched_mlp.look_up_rows(net.model, st.packed, x, st.anchor if together else None)
        return laid[0]

    def unpack(self, st: DittoState) -> None:
        """The round's models readable again where :meth:`lay_beside` packed their first layers by the clients'
        input supports (batched_mlp.pack_columns): before anything reads them but :meth:`step_with`."""
        if st.packed is not None:
            batched_mlp.unpack_columns(st.packed)
            st.packed = None

    def step_with(
        self,
        st: DittoState,
        net: Net,
        local: Params,
        x: Tensor,
        y: Tensor,
        selected: Tensor,
        lr: float,
        weight_decay: float,
    ) -> Tensor | None:
        """The global-model copies' local step (weight decay ``weight_decay``) and the personal step of every set, in
        place, their shared first layer as one GEMM where :meth:`lay_beside` laid them out: the copies' losses.
        Where it packed the copies alone, their packed step and the personal sets' own steps (:meth:`step`). None:
        nothing done (take the steps one set at a time)."""
        together = self.together(st, net)
        if not (together or st.packed is not None) or isinstance(lr, Tensor) or not isinstance(x, Tensor):
            self.unpack(st)
            return None
        own = [(lam, st.anchor) for lam in st.lams] if together else []
        decays = [(weight_decay, None)] + [(self.weight_decay, prox) for prox in own]
        sets = [local, *st.working] if together else [local]
        if st.packed is None:
            losses = batched_mlp.sgd_steps_side_by_side(net.model, sets, x, y, lr, decays)
            return None if losses is None else losses[0]
        rows = None
        if st.packed.inputs_rows is not None and net.minibatch_rows is not None:
            rows = torch.from_numpy(net.train_data.positions(net.minibatch_rows)).to(x.device)
        losses = batched_mlp.sgd_steps_packed(net.model, sets, st.packed, x, y, lr, decays, rows)[0]
        if not together:
            self.step(st, net, x, y, selected, lr)
        return losses

    def together(self, st: DittoState, net: Net) -> bool:
        """Whether the personal sets and the global-model copies can step together: the same clients, the same
        learning rate, the MLP formulation."""
        together = net.formulation is batched_mlp and net.vectorize and self.lr_scale == 1
        return together and bool(st.working) and bool(st.active.all())

    def block(self, st: DittoState, rows: slice) -> DittoState:
        """The round's state of the selected clients at positions ``rows`` (:meth:`Algorithm.client_block`): views
        of the active ones' working models, so that :meth:`step` trains them in place."""
        if not st.working:
            return replace(st, active=st.active[rows])
        act = self._working_rows(st, rows)
        return replace(
            st,
            active=st.active[rows],
            lams=[lam[act] for lam in st.lams],
            working=[rows_of(v, act) for v in st.working],
            working_idx=st.working_idx[act],
        )

    def merge_block(self, st: DittoState, block: DittoState, rows: slice) -> None:
        """Write a block's working models back (where its steps did not write into the views)."""
        if st.working:
            act = self._working_rows(st, rows)
            for v, b in zip(st.working, block.working):
                write_rows(v, act, b)

    @staticmethod
    def _working_rows(st: DittoState, rows: slice) -> slice:
        """The rows of ``working`` (the active selected clients, in order) that selection positions ``rows`` hold."""
        before = int(st.active[: rows.start].sum())
        return slice(before, before + int(st.active[rows].sum()))

    def set_bytes(self, st: DittoState) -> int | None:
        """Bytes of one client's personal models over all lambda sets (none if no client personalizes this round);
        None if a set's lambdas differ between this round's clients: the batched step's arithmetic then depends on
        which clients step together (one lambda is folded into a scalar decay, batched_mlp), so blocks could
        change the last bit of the models."""
        if not st.working:
            return 0
        if any(batched_mlp.one_lambda(lam) is None for lam in st.lams if len(lam)):
            return None
        return len(st.working) * param_bytes(st.anchor)

    def finish_round(self, st: DittoState) -> None:
        if st.packed is not None:
            raise RuntimeError("Ditto.finish_round: the round's models are still packed (call unpack first)")
        if st.working:
            for v_all, v in zip(st.personal, st.working):
                put(v_all, st.working_idx, v)
            st.trained[st.working_idx] = True
        st.anchor, st.active, st.lams, st.working, st.working_idx = None, None, [], [], None

    def deployed(self, st: DittoState, global_params: Params, which: int = 0) -> Params:
        """Personal models of set ``which`` (the global model for clients never trained), stacked over clients."""
        mask = st.trained
        out = {}
        for k, v in st.personal[which].items():
            g = global_params[k].unsqueeze(0).expand_as(v)
            out[k] = torch.where(mask.reshape(-1, *([1] * (v.dim() - 1))), v, g)
        return out


class DittoAlgorithmMixin:
    """What the algorithms carrying Ditto personal models share (DP-FedAvg with adaptive clipping, HDP-FedAvg,
    FedHDP): the local SGD step of the global-model copies plus the personal step, the deployed models and the final
    models the experiment evaluates. Needs ``self.ditto`` (a :class:`Ditto` or None), ``self.weight_decay``,
    ``self.state`` and a state with ``net``, ``local``, ``global_params``, ``n_clients`` and ``ditto``."""

    def start_local_and_personal(
        self, state, selected: Tensor, private: Tensor | None = None, active: Tensor | None = None
    ) -> None:
        """The round's start: a copy of the global model for each selected client and the personal models of the
        active ones (:meth:`Ditto.start_round`), laid out so a local step can take them together."""
        state.local = stack(state.global_params, len(selected))
        if state.ditto is not None:
            self.ditto.start_round(state.ditto, state.global_params, selected, private, active)
            state.local = self.ditto.lay_beside(state.ditto, state.net, state.local, selected)

    def local_models(self, state) -> Params:
        """This round's copies of the global model after the local steps (the host's sync reads them here)."""
        if state.ditto is not None:
            self.ditto.unpack(state.ditto)
        return state.local

    def local_step(self, state, x: Tensor, y: Tensor, selected: Tensor, lr: float) -> Tensor:
        if state.ditto is not None:
            losses = self.ditto.step_with(state.ditto, state.net, state.local, x, y, selected, lr, self.weight_decay)
            if losses is not None:
                return losses
        state.local, losses = client_sgd(state.net, state.local, x, y, lr, self.weight_decay, inplace=True)
        if state.ditto is not None:
            self.ditto.step(state.ditto, state.net, x, y, selected, lr)
        return losses

    def block_bytes(self, state) -> int | None:
        """Local steps train each client alone and draw nothing at random: the global-model copy and the personal
        models of a client, this many bytes (None with mixed lambdas, :meth:`Ditto.set_bytes`). None too where the
        sets step side by side (:meth:`Ditto.step_with`): their shared first-layer GEMM is fastest over all clients
        (FedHDP's round on the 2-core AMD VM: 0.88-0.97x the time of the sets stepping alone in 16 MiB blocks, side
        by side in those blocks 1.01-1.07x; benchmarks/RESULTS.md), and where the copies' first layer is packed for
        the round (:meth:`Ditto.lay_beside`)."""
        if state.ditto is not None and (self.ditto.together(state.ditto, state.net) or state.ditto.packed is not None):
            return None
        own = param_bytes(state.global_params)
        sets = 0 if state.ditto is None else self.ditto.set_bytes(state.ditto)
        return None if sets is None else own + sets

    def client_block(self, state, rows: slice):
        ditto = None if state.ditto is None else self.ditto.block(state.ditto, rows)
        return replace(state, local=rows_of(state.local, rows), ditto=ditto)

    def merge_client_block(self, state, block, rows: slice) -> None:
        write_rows(state.local, rows, block.local)
        if state.ditto is not None:
            self.ditto.merge_block(state.ditto, block.ditto, rows)

    def deployed_params(self, state, ctx=None) -> Params:
        if state.ditto is None:
            return expand(state.global_params, state.n_clients)
        return self.ditto.deployed(state.ditto, state.global_params, 0)

    def final_models(self, state=None) -> dict:
        """{"global": the global model as every client's model, "personal": [one stacked set per lambda pair]}."""
        state = state or self.state
        out = {"global": expand(state.global_params, state.n_clients), "personal": []}
        if state.ditto is not None:
            out["personal"] = [
                self.ditto.deployed(state.ditto, state.global_params, i) for i in range(len(self.ditto.pairs))
            ]
        return out


__all__ = ["Ditto", "DittoState", "DittoAlgorithmMixin"]
