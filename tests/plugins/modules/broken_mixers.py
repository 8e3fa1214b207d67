"""Mixers that each break one property check-mixer tests (loaded by import path in test_check_mixer.py)."""

import torch
from torch import nn

from mecheval.models.mixers import Mixer
from mecheval.models.sites import Site


class CumMean(Mixer):
    """A correct reference: core_t = mean_{s <= t} W_in x_s, y_t = W_out core_t; step form by running sums."""

    has_conv = False

    def __init__(self, d_model, conv, options, layer_idx, max_len):
        super().__init__(d_model, conv, options, layer_idx, max_len)
        self.w_in = nn.Linear(d_model, d_model, bias=False)
        self.w_out = nn.Linear(d_model, d_model, bias=False)
        self.core_out = Site()

    def forward(self, x):  # [B, T, D] -> [B, T, D]
        n = torch.arange(1, x.shape[1] + 1, dtype=x.dtype, device=x.device)[:, None]
        return self.w_out(self.core_out(self.w_in(x).cumsum(1) / n))

    def init_state(self, batch_size, device=None, dtype=None):
        return torch.zeros(batch_size, self.d_model, device=device, dtype=dtype), 0

    def step(self, x_t, state):
        total, n = state
        total = total + self.w_in(x_t)
        return self.w_out(total / (n + 1)), (total, n + 1)


class NonCausal(CumMean):
    """Sees the future: the mean over the whole sequence."""

    def forward(self, x):
        return self.w_out(self.core_out(self.w_in(x).mean(1, keepdim=True).expand_as(x)))


class StepDiffers(CumMean):
    """The step form forgets the count: a running sum, not a mean (equal to forward at t = 0 only)."""

    def step(self, x_t, state):
        total, n = state
        total = total + self.w_in(x_t)
        return self.w_out(total), (total, n + 1)


class DeadParameter(CumMean):
    """A parameter the forward never uses (no gradient ever reaches it)."""

    def __init__(self, d_model, conv, options, layer_idx, max_len):
        super().__init__(d_model, conv, options, layer_idx, max_len)
        self.forgotten = nn.Parameter(torch.ones(d_model))


class SitesOutOfOrder(CumMean):
    """`late_out` is created before `core_out` but visited after it."""

    def __init__(self, d_model, conv, options, layer_idx, max_len):
        super().__init__(d_model, conv, options, layer_idx, max_len)
        del self.core_out
        self.late_out = Site()
        self.core_out = Site()  # registered again: now after late_out in module order

    def forward(self, x):
        return self.late_out(super().forward(x))
