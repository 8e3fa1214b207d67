import torch
from torch import nn

from mylab.parts.gating import Gate


class Core(nn.Module):
    """core_t = g_t ⊙ mean_{s <= t} W_v x_s, [B, T, D]."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.value = nn.Linear(d, d, bias=False)
        self.gate = Gate(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = torch.arange(1, x.shape[1] + 1, dtype=x.dtype, device=x.device)[:, None]
        return self.gate(x) * self.value(x).cumsum(1) / n
