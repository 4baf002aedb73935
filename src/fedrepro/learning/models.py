"""Models of the reproduced learning experiments (Ozkara et al., ICLR 2023, Sec. 4 and App. K.1; docs/notes/adaped.md
section 4.0).

- :class:`LeNet5`, the paper's "5-layer CNN": conv 5x5 (6) -> conv 5x5 (16) -> FC 256x120 -> FC 120x84 -> FC 84xC.
  GAP (activations, pooling): ReLU and 2x2 max-pool after each convolution (LeNet-5 style); this is the only
  common choice that gives the printed flatten size 256 = 16*4*4 on 28x28 inputs (44,426 parameters). The
  CIFAR-10 variant is the same class with ``in_channels=3, input_hw=32`` (flatten 400 = 16*5*5; 62,006 params).
- :class:`Cifar100CNN`: 2 conv layers of 64 filters 5x5 -> FC 384 -> FC 192 -> 100. GAP (padding, pooling):
  'valid' padding and 2x2 max-pool after each conv with ReLU, flatten 64*5*5 = 1600 (815,332 params, ~0.82 M);
  'same' padding would give ~1.77 M.
- :class:`MLP` and :class:`Linear` (softmax regression) for tests and synthetic tasks.

All models map a batch (B, *feature_shape) to logits (B, n_classes) and have no buffers (no batch norm), so the
engine can call them functionally on stacked per-client parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import Tensor, nn
from torch.nn import functional as F

from fedrepro.registry import Registry


def _conv_out(hw: int, kernel: int = 5) -> int:
    """Side after a 'valid' conv of ``kernel`` and a 2x2 max-pool."""
    return (hw - kernel + 1) // 2


class ConvNet(nn.Module):
    """The shape of every CNN here: blocks of (conv, ReLU, 2x2 max-pool), flatten, then fully connected layers
    with ReLU between them. ``conv_layers`` and ``fc_layers`` name the layers in order; from them the engine
    computes the same function in its client-batched formulation (:mod:`fedrepro.learning.batched_cnn`)."""

    conv_layers: tuple[str, ...] = ("conv1", "conv2")
    fc_layers: tuple[str, ...] = ("fc1", "fc2", "fc3")
    pool = 2

    def forward(self, x: Tensor) -> Tensor:
        for name in self.conv_layers:
            x = F.max_pool2d(F.relu(getattr(self, name)(x)), self.pool)
        x = x.flatten(1)
        for name in self.fc_layers[:-1]:
            x = F.relu(getattr(self, name)(x))
        return getattr(self, self.fc_layers[-1])(x)

    def geometry(self, feature_shape: Sequence[int]) -> list[tuple[int, ...]]:
        """Per convolution: (C, H, W) of its input after padding, (Ho, Wo) of its output, (Hp, Wp) after pooling
        (the hand-written formulations' shapes: fedrepro.learning.batched_cnn, native_cnn)."""
        C, H, W = feature_shape
        out = []
        for name in self.conv_layers:
            conv = getattr(self, name)
            (kh, kw), (ph, pw) = conv.kernel_size, conv.padding
            H, W = H + 2 * ph, W + 2 * pw
            Ho, Wo = H - kh + 1, W - kw + 1
            out.append((C, H, W, Ho, Wo, Ho // self.pool, Wo // self.pool))
            C, H, W = conv.out_channels, Ho // self.pool, Wo // self.pool
        return out


class LeNet5(ConvNet):
    """The paper's 5-layer CNN (MNIST/FEMNIST: 1x28x28; CIFAR-10: ``in_channels=3, input_hw=32``)."""

    def __init__(self, in_channels: int = 1, n_classes: int = 10, input_hw: int = 28):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        side = _conv_out(_conv_out(input_hw))
        self.fc1 = nn.Linear(16 * side * side, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, n_classes)


class Cifar100CNN(ConvNet):
    """CIFAR-100 CNN: 2 x (conv 5x5, 64 filters, 'valid', ReLU, max-pool 2) -> FC 384 -> FC 192 -> n_classes."""

    def __init__(self, in_channels: int = 3, n_classes: int = 100, input_hw: int = 32):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 5)
        self.conv2 = nn.Conv2d(64, 64, 5)
        side = _conv_out(_conv_out(input_hw))
        self.fc1 = nn.Linear(64 * side * side, 384)
        self.fc2 = nn.Linear(384, 192)
        self.fc3 = nn.Linear(192, n_classes)


class MLP(nn.Module):
    """Fully connected ReLU network on flattened inputs."""

    def __init__(self, in_features: int, n_classes: int, hidden: Sequence[int] = (32,)):
        super().__init__()
        sizes = [in_features, *hidden]
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.out = nn.Linear(sizes[-1], n_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = x.flatten(1)
        for layer in self.hidden:
            x = F.relu(layer(x))
        return self.out(x)


class Linear(nn.Module):
    """Softmax (multinomial logistic) regression on flattened inputs."""

    def __init__(self, in_features: int, n_classes: int):
        super().__init__()
        self.out = nn.Linear(in_features, n_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(x.flatten(1))


def _cifar10_cnn(in_channels: int = 3, n_classes: int = 10, input_hw: int = 32) -> LeNet5:
    return LeNet5(in_channels, n_classes, input_hw)


_SHARED = {"lenet5": LeNet5, "cifar10_cnn": _cifar10_cnn, "cifar100_cnn": Cifar100CNN, "mlp": MLP, "linear": Linear}


# the paper-free models (this module); a paper declares its own architectures in its ``MODELS`` (fedrepro.papers)
MODELS: Registry[Callable[..., nn.Module]] = Registry("model", dict.fromkeys(_SHARED, __name__), "MODELS")
for _name, _factory in _SHARED.items():
    MODELS.add(_name, _factory)


def model(name: str):
    """Decorator registering a model class (or factory) as ``name``."""
    return MODELS.register(name)


def build_model(name: str, **kw) -> nn.Module:
    """Instantiate a registered model (``MODELS``) with keyword arguments, e.g. ``build_model("lenet5")``."""
    return MODELS.get(name)(**kw)


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = ["MODELS", "Cifar100CNN", "ConvNet", "LeNet5", "Linear", "MLP", "build_model", "model", "n_params"]
