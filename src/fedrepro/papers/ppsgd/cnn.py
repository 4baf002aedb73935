"""PPSGD-exp with a CNN and an additive output layer (Fig. 1d; docs/notes/ppsgd.md §2.5, [code] ``main_nn.py``).

Model: f_i((w, W), theta_i, (x, y)) = l(y, (w + theta_i)^T Phi_W(x)). The representation Phi_W (global, private) is
the JAX stax stack of the code:

    Conv(16, 8x8, stride 2, SAME) -> ReLU -> MaxPool(2x2, stride 1)
    Conv(32, 4x4, stride 2, VALID) -> ReLU -> MaxPool(2x2, stride 1) -> Flatten -> Dense(32) -> ReLU

and w, theta_i in R^{32 x K}. Loss: mean((pred - y)^2) over the batch and the K outputs (no 1/2; y = one-hot minus
the target offset). One round on the L sampled users S, each with one minibatch of m images:

    (g_W, g_w, g_theta)_i = per-user gradients (vmapped over the L users, one batched call)
    (g_W, g_w)_i          clipped jointly to total L2 norm C;  g_theta_i unclipped
    W, w                  <- W, w - eta_w ((1/L) sum_i clip(g)_i + (sigma C / L) N(0, I))   (noise on every tensor)
    theta_i               <- theta_i - L eta_theta g_theta_i                                  ([code]: factor L)

GAPs (docs/notes/ppsgd.md §7.11): the pooling padding is stax's default VALID (after the second conv the 5x5 map pools
to 4x4:
512 features); docs/notes/ppsgd.md's "5 x 5 x 32 = 800" (dense 25,632 parameters) needs the second pool to keep the 5x5
map
(SAME padding), available as ``pool_padding="same_second"``. W is
initialized as stax does (Glorot normal weights, N(0, 1e-6^2) biases) from a torch generator with the code's fixed
seed 42 (JAX's PRNG bits cannot be reproduced in torch); w ~ N(0, 1/32) as the code (the paper's algorithms start
at 0); theta_i = 0.

Configurations of the (step, alpha) grid are independent trainings;
:func:`fedrepro.papers.ppsgd.experiments.cnn.train_cnn` runs them one after another on the same batch sequence, each
with its own noise stream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import grad, vmap

FEATURES = 32
W_SEED = 42  # [code] stax init with PRNGKey(42): the representation starts the same in every run


def _glorot_normal(shape, fan_in, fan_out, gen):
    return torch.randn(shape, generator=gen) * math.sqrt(2.0 / (fan_in + fan_out))


def init_representation(pool_padding: str = "valid", seed: int = W_SEED) -> dict[str, torch.Tensor]:
    """Phi_W's parameters (float32), stax-style init from a fixed seed."""
    gen = torch.Generator().manual_seed(seed)
    flat = 32 * (5 * 5 if pool_padding == "same_second" else 4 * 4)
    W = {
        "c1w": _glorot_normal((16, 1, 8, 8), 1 * 64, 16 * 64, gen),
        "c1b": torch.randn(16, generator=gen) * 1e-6,
        "c2w": _glorot_normal((32, 16, 4, 4), 16 * 16, 32 * 16, gen),
        "c2b": torch.randn(32, generator=gen) * 1e-6,
        "dw": _glorot_normal((flat, FEATURES), flat, FEATURES, gen),
        "db": torch.randn(FEATURES, generator=gen) * 1e-6,
    }
    return W


def _pool(h: torch.Tensor, same: bool) -> torch.Tensor:
    if same:  # stride 1, window 2: pad one row/column at the end (TF/stax SAME)
        h = F.pad(h, (0, 1, 0, 1), value=-math.inf)
    return F.max_pool2d(h, 2, stride=1)


def features(W: dict, x: torch.Tensor, pool_padding: str = "valid") -> torch.Tensor:
    """Phi_W(x) for images x (..., 28, 28) -> (..., 32)."""
    lead = x.shape[:-2]
    h = x.reshape(-1, 1, 28, 28)
    h = F.pad(h, (3, 3, 3, 3))  # SAME for an 8x8 kernel, stride 2 on 28x28 (TF pads 3 / 3)
    h = _pool(F.relu(F.conv2d(h, W["c1w"], W["c1b"], stride=2)), False)
    h = _pool(F.relu(F.conv2d(h, W["c2w"], W["c2b"], stride=2)), pool_padding == "same_second")
    h = F.relu(h.flatten(1) @ W["dw"] + W["db"])
    return h.reshape(*lead, FEATURES)


class GlobalModel(nn.Module):
    """The protocol's global model (Phi_W, w) as one module, for a method from outside the package
    (:mod:`fedrepro.papers.ppsgd.method`): ``forward(x (B, 784 or 28, 28)) = Phi_W(x) @ w``, parameters the
    representation's tensors (initialized as :func:`init_state` does) and the head ``w`` (32, K)."""

    def __init__(self, W: dict[str, torch.Tensor], w: torch.Tensor, pool_padding: str = "valid"):
        super().__init__()
        self.pool_padding = pool_padding
        for k, v in W.items():
            self.register_parameter(k, nn.Parameter(v.detach().clone()))
        self.w = nn.Parameter(w.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        W = {k: getattr(self, k) for k in ("c1w", "c1b", "c2w", "c2b", "dw", "db")}
        return (
            features(W, x.reshape(*x.shape[:-1], 28, 28) if x.shape[-1] == 28 * 28 else x, self.pool_padding) @ self.w
        )


def _loss(W, w, theta_i, x, y, pool_padding):
    pred = features(W, x, pool_padding) @ (w + theta_i)
    return torch.mean((pred - y) ** 2)


@dataclass
class CnnState:
    W: dict[str, torch.Tensor]
    w: torch.Tensor  # (32, K)
    theta: torch.Tensor  # (N, 32, K)

    def to(self, device) -> CnnState:
        return CnnState({k: v.to(device) for k, v in self.W.items()}, self.w.to(device), self.theta.to(device))


def init_state(n_users: int, n_classes: int, rng: np.random.Generator, pool_padding: str = "valid") -> CnnState:
    w = torch.from_numpy(rng.normal(0.0, math.sqrt(1.0 / FEATURES), (FEATURES, n_classes)).astype(np.float32))
    return CnnState(init_representation(pool_padding), w, torch.zeros(n_users, FEATURES, n_classes))


def user_gradients(state: CnnState, users: torch.Tensor, X: torch.Tensor, Y: torch.Tensor, pool_padding: str):
    """Per-user gradients (g_W dict of (L, ...), g_w (L, 32, K), g_theta (L, 32, K)) on minibatches X (L, m, 28,
    28), Y (L, m, K): one vmapped call over the L users."""
    per_user = vmap(grad(_loss, argnums=(0, 1, 2)), in_dims=(None, None, 0, 0, 0, None))
    return per_user(state.W, state.w, state.theta[users], X, Y, pool_padding)


def round_step(
    state: CnnState,
    users: np.ndarray,
    X: torch.Tensor,
    Y: torch.Tensor,
    eta_w: float,
    eta_theta: float,
    sigma: float,
    clip: float,
    gen: torch.Generator,
    pool_padding: str = "valid",
) -> dict:
    """One PPSGD-exp CNN round on distinct ``users`` (in place). Returns the users' joint (W, w) gradient norms."""
    users_t = torch.as_tensor(np.asarray(users, dtype=np.int64), device=state.w.device)
    L = len(users_t)
    gW, gw, gth = user_gradients(state, users_t, X, Y, pool_padding)
    sq = gw.pow(2).sum(dim=(1, 2))
    for g in gW.values():
        sq = sq + g.reshape(L, -1).pow(2).sum(dim=1)
    norms = sq.sqrt()
    factor = 1.0 / torch.clamp(norms / clip, min=1.0)  # clip_C jointly over (W, w), per user
    if eta_theta != 0:
        state.theta[users_t] -= (L * eta_theta) * gth
    if eta_w != 0:

        def noisy_mean(g):
            s = torch.einsum("l...,l->...", g, factor)
            if sigma > 0:
                s = s + (sigma * clip) * torch.randn(s.shape, generator=gen, device=gen.device)
            return s / L

        for k in state.W:
            state.W[k] -= eta_w * noisy_mean(gW[k])
        state.w -= eta_w * noisy_mean(gw)
    return {"norms": norms}


def accuracy(
    state: CnnState, x_test: torch.Tensor, y_test: torch.Tensor, user_of_row: torch.Tensor, pool_padding: str = "valid"
) -> float:
    """Pooled top-1 test accuracy, every row scored with its user's w + theta_i."""
    if len(x_test) == 0:
        return float("nan")
    phi = torch.cat([features(state.W, x_test[i : i + 4096], pool_padding) for i in range(0, len(x_test), 4096)])
    pred = torch.einsum("rf,rfk->rk", phi, state.w + state.theta[user_of_row])
    hit = torch.gather(y_test, 1, pred.argmax(dim=1, keepdim=True))
    return float(hit.float().mean())
