"""A small batch whose per-token ratios are chosen by hand, shared by the policy-loss tests.

Row 0 and row 1 are responses (row 1's last token is padding); row 2 is a fully masked
padding row filled with garbage that must not leak into the loss or the gradient.

            token 0   token 1   token 2
    ℓ    r0: -1.0     -0.5      -2.0        r1: -0.3   -1.2   -0.7(pad)
    r    r0:  1.5      0.7       1.0        r1:  0.95   1.3    2.0(pad)
    A    r0:  1.0     -1.0       2.0        r1: -2.0    0.5   -1.0(pad)

ℓ_old = ℓ - log r, so exp(ℓ - ℓ_old) = r. Valid tokens: 5.
"""

import math
from dataclasses import dataclass

import pytest
import torch


@dataclass
class HandBatch:
    log_probs: torch.Tensor  # [3, 3], requires grad
    old_log_probs: torch.Tensor  # [3, 3]
    advantages: torch.Tensor  # [3, 3]
    mask: torch.Tensor  # [3, 3]
    scores: torch.Tensor  # [3]


LOG_PROBS = [[-1.0, -0.5, -2.0], [-0.3, -1.2, -0.7]]
RATIOS = [[1.5, 0.7, 1.0], [0.95, 1.3, 2.0]]
ADVANTAGES = [[1.0, -1.0, 2.0], [-2.0, 0.5, -1.0]]


@pytest.fixture
def hand() -> HandBatch:
    old = [
        [lp - math.log(r) for lp, r in zip(lps, rs, strict=True)]
        for lps, rs in zip(LOG_PROBS, RATIOS, strict=True)
    ]
    f64 = torch.float64
    log_probs = torch.tensor(LOG_PROBS + [[50.0, 50.0, 50.0]], dtype=f64, requires_grad=True)
    old_log_probs = torch.tensor(old + [[-1e4, -1e4, -1e4]], dtype=f64)
    advantages = torch.tensor(ADVANTAGES + [[1e6, -1e6, 1e6]], dtype=f64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [0, 0, 0]])
    scores = torch.tensor([1.0, 0.0, 1.0], dtype=f64)  # row 0 positive, row 1 not
    return HandBatch(log_probs, old_log_probs, advantages, mask, scores)
