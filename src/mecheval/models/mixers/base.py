"""What every sequence mixer is: a causal map [B, T, D] -> [B, T, D] with named internal sites."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from pydantic import BaseModel, ConfigDict
from torch import nn

from mecheval.models.shortconv import ConvSpec


class MixerOptions(BaseModel):
    """Per-mixer options; each mixer subclasses this (unknown fields are an error)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Mixer(nn.Module):
    """Base class. Subclasses implement the parallel `forward` and, where the mixer is a recurrence,
    `init_state` + `step` (the recurrent view); `recurrent` then runs the step form over a sequence.

    Internal sites (identity `Site` modules the LM names `layers.{i}.conv_out` / `layers.{i}.core_out`)
    are attributes `conv_out` (only where a convolution exists) and `core_out`.
    A mixer without a convolution slot sets `has_conv = False`; it then accepts only `conv == 0`.
    """

    has_conv: ClassVar[bool] = True

    def __init__(self, d_model: int, conv: ConvSpec, options: MixerOptions, layer_idx: int, max_len: int):
        super().__init__()
        if conv != 0 and not self.has_conv:
            raise ValueError(f"{type(self).__name__} has no short convolution: d_conv must be 0, got {conv!r}")
        self.d_model, self.layer_idx, self.max_len = d_model, layer_idx, max_len

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, T, D] -> [B, T, D]
        raise NotImplementedError

    def init_state(self, batch_size: int, device=None, dtype=None) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no recurrent form")

    def step(self, x_t: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """x_t: [B, D] -> (y_t [B, D], new state)."""
        raise NotImplementedError(f"{type(self).__name__} has no recurrent form")

    def recurrent(self, x: torch.Tensor) -> torch.Tensor:
        """The step form over a whole sequence (a reference; loops over time): [B, T, D] -> [B, T, D]."""
        state = self.init_state(x.shape[0], device=x.device, dtype=x.dtype)
        ys = []
        for t in range(x.shape[1]):
            y, state = self.step(x[:, t], state)
            ys.append(y)
        return torch.stack(ys, dim=1)


@dataclass(frozen=True)
class MixerSpec:
    """Registry entry: the class, its options, and the published defaults of a block that uses it."""

    cls: type[Mixer]
    options: type[MixerOptions]
    default_conv: ConvSpec  # the published short-conv kernel (0 where the mixer has none)
    default_mlp: bool = True
    default_norm: str = "layernorm"
    has_recurrent: bool = True  # False: no step form (e.g. attention without a KV cache)

    @property
    def has_conv(self) -> bool:
        """False: the mixer has no convolution slot (d_conv must be 0)."""
        return self.cls.has_conv
