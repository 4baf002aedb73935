"""Losses shared by the distillation-based personalized methods (AdaPeD, QuPeD, Federated Mutual Learning).

f^KD (docs/notes/adaped.md section 2.9 / 7.6 default, App. H of Ozkara et al. 2023): the batch mean of
KL(softmax(teacher logits) || softmax(student logits)), temperature 1. Gradients flow into whichever argument the
caller differentiates (both, if neither is detached).
"""

from __future__ import annotations

from torch import Tensor
from torch.nn import functional as F


def kd_loss(teacher_logits: Tensor, student_logits: Tensor) -> Tensor:
    """f^KD: batch mean of KL(softmax(teacher) || softmax(student))."""
    log_p, log_q = F.log_softmax(teacher_logits, -1), F.log_softmax(student_logits, -1)
    return (log_p.exp() * (log_p - log_q)).sum(-1).mean()


__all__ = ["kd_loss"]
