import torch
from torch import nn

from mecheval.models.sites import Site


class Gate(nn.Module):
    """g = sigmoid(W x), [B, T, D]; site `gate_out` (two modules below the mixer: mixer.core.gate)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d, d, bias=False)
        self.gate_out = Site()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gate_out(torch.sigmoid(self.proj(x)))
