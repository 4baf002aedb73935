"""FedHDP's FEMNIST CNN (Aldaghri et al., App. C Table 6), registered as model ``fedhdp_cnn``."""

from __future__ import annotations

from torch import nn

from fedrepro.learning.models import ConvNet, model


@model("fedhdp_cnn")
class FedHDPCNN(ConvNet):
    """FedHDP's FEMNIST CNN (Aldaghri et al., App. C Table 6): conv 16 -> pool -> conv 32 -> pool -> FC 128 -> C.
    GAPs: 3x3 kernels, 'same' padding, 2x2 max-pool (implied by the printed shapes; 213,630 parameters at C = 62);
    the two dropout layers (25 %, 50 %) are left out: the batched engine trains without random layers."""

    fc_layers = ("fc1", "fc2")

    def __init__(self, in_channels: int = 1, n_classes: int = 62, input_hw: int = 28):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * (input_hw // 4) ** 2, 128)
        self.fc2 = nn.Linear(128, n_classes)
