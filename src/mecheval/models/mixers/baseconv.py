"""BaseConv (Arora et al., 2023, "Zoology"), as in zoology's `BaseConv` used by the study.

    c = conv(u) (+ b_c)         the causal conv of `d_conv` on the D channels (site `conv_out`, [B, T, D]):
                                a short conv of kernel k, or the implicit long conv ("long"); d_conv 0
                                removes it (c = u, so the layer no longer mixes positions); b_c [D] only
                                with `conv_bias` (zoology's Conv1d has one)
    core = c ⊙ (W u (+ b))      the gated convolution (site `core_out`, [B, T, D]); b [D] only with `proj_bias`
    y = core + u                [B, T, D]
There is no in- or out-projection: the conv reads the mixer input directly, as published.
Published: layer 0 short conv 3, layer 1 "long" (the `baseconv` preset); in the Based hybrid,
layer 0 (short conv 3). The recurrent view steps the conv (its state) and is otherwise pointwise.
"""

from __future__ import annotations

import torch
from pydantic import Field
from torch import nn

from mecheval.models.mixers.base import Mixer, MixerOptions, MixerSpec
from mecheval.models.shortconv import ConvSpec, make_conv, short_conv_bias
from mecheval.models.sites import Site


class BaseConvOptions(MixerOptions):
    """Biases zoology's BaseConv has and ours leaves out by default (`build: study` sets both)."""

    conv_bias: bool = Field(False, description="a bias after the short conv, as zoology's Conv1d")
    proj_bias: bool = Field(False, description="a bias in the gate's projection W, as zoology's nn.Linear")


class BaseConv(Mixer):
    def __init__(self, d_model: int, conv: ConvSpec, options: BaseConvOptions, layer_idx: int, max_len: int):
        super().__init__(d_model, conv, options, layer_idx, max_len)
        self.conv = make_conv(conv, d_model, max_len)
        if self.conv is not None:
            self.conv_out = Site()
        self.conv_bias = short_conv_bias(self.conv, conv, "baseconv") if options.conv_bias else None
        self.proj = nn.Linear(d_model, d_model, bias=options.proj_bias)
        self.core_out = Site()

    def _conv(self, u: torch.Tensor) -> torch.Tensor:
        """The conv and its bias if any: [B, T, D] -> [B, T, D]."""
        c = self.conv(u)
        return c if self.conv_bias is None else c + self.conv_bias

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        c = u if self.conv is None else self.conv_out(self._conv(u))
        return self.core_out(c * self.proj(u)) + u

    def init_state(self, batch_size: int, device=None, dtype=None):
        """The conv's state (None without a conv)."""
        return None if self.conv is None else self.conv.init_state(batch_size, device=device, dtype=dtype)

    def step(self, u_t: torch.Tensor, state):
        c, state = (u_t, None) if self.conv is None else self.conv.step(u_t, state)
        if self.conv_bias is not None:
            c = c + self.conv_bias
        return c * self.proj(u_t) + u_t, state


SPEC = MixerSpec(cls=BaseConv, options=BaseConvOptions, default_conv=3, default_mlp=True, default_norm="layernorm")
