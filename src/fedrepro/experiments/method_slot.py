"""How a training kind takes one more method from outside the package (``python -m fedrepro compare``).

A kind that trains engine Algorithms declares a :class:`MethodSlot` (``experiment_kind(..., method_slot=...)``): how
to turn its parameters into a run of the user's method alone under the same protocol (same partition,
initialization, data order, lr grid and selection rule, rounds, evaluation, privacy calibration), and how to read
the table cells of one method from a run's metrics. A kind that cannot run a user's Algorithm declares none, or a
``no_method_slot`` sentence saying why (the refusal ``compare`` prints)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# the rows of a comparison table: the paper's methods and the user's, as table.csv records them and the tables say
PAPER, YOURS = "paper", "yours"
ORIGIN = {PAPER: "paper's method (rebuilt)", YOURS: "yours: not in the paper, never judged"}


@dataclass(frozen=True)
class MethodSlot:
    """``only(params, name, private)``: the kind's parameters with ``name`` (an Algorithm registered under that name,
    fedrepro.learning.algorithms.register_external) as the only method and nothing that names the paper's methods
    (checks); ``private``: the method accepts a ``dp`` mechanism, for protocols whose rows are private.
    ``private(params)``: whether the protocol's rows are private (the method is then trained with the noise the
    protocol calibrates, and must accept ``dp``). ``methods(params)``: the paper's method names, in table order.
    ``cells(metrics, name)``: one method's table cells {column: value} from a run's metrics (the columns a paired
    difference is taken of). ``curves(history, name)``: one method's evaluation rows (columns x, y, series) for the
    figure, or None when the kind draws none. ``x_label``/``y_label``: the figure's axes. ``what``: what a cell is,
    in words (the table's legend); ``private_text``: what the legend adds in a private protocol.
    ``paired(params, baseline, constructed)``: the columns a paired difference with ``baseline`` takes (None: every
    column but an epsilon's), ``constructed`` whether the protocol released what the method sends (its steps or its
    messages: Comparison.by_construction), and
    ``paired_text`` says why in words. ``with_lr(only_params, name, grid)``: the method's run with its own learning
    rates ``grid`` (``compare --lr``) in place of the protocol's, chosen by the protocol's own rule, which
    ``lr_text`` states (None: the protocol takes no lr of a method's own, the refusal says why). ``interface`` and
    ``register``: a protocol whose method is not an engine Algorithm (its base class, and how it is registered)."""

    only: Callable[[dict, str, bool], dict]
    private: Callable[[dict], bool]
    methods: Callable[[dict], list[str]]
    cells: Callable[[dict, str], dict[str, float]]
    curves: Callable[[Any, str], Any] | None = None
    x_label: str = ""
    y_label: str = ""
    what: str = "test accuracy (%)"
    paired: Callable[[dict, str, bool], list[str] | None] = lambda params, baseline, constructed: None
    paired_text: str = ""
    private_text: str = " at each epsilon (the noise the protocol calibrates)"
    with_lr: Callable[[dict, str, list[float]], dict] | None = None
    lr_text: str = ""
    # the interface a method implements: None, an engine Algorithm; else its base class (e.g. the histograms paper's
    # HistogramEstimator) and ``register(cls)`` that makes it buildable by name for the kind's run
    interface: type | None = None
    register: Callable[[type], str] | None = None
    # how a method's privacy is had under the protocol, in words, for the table and compare.json (None: the slot says
    # nothing beyond ``what``): e.g. by construction (the protocol releases its messages) or applied by the method
    privacy_note: Callable[[type], str] | None = None
    # privacy by construction per local step (AdaPeD's DP-FedAvg protocol): in a private protocol the method is built
    # without dp= and each local step's minibatches reach it as fedrepro.learning.engine.Released, whose gradients
    # the protocol clips and noises with the mechanism its accountant calibrates, once per step
    releases_steps: bool = False
    # privacy by construction per round (FedHDP's protocol): a method that sends client_message is run as messages,
    # the protocol's release (fedrepro.learning.engine.MessageRelease), server_update (with or without the protocol's
    # noise), and needs no dp=; one that sends none is trained as ``privacy_note`` says
    releases_messages: bool = False
