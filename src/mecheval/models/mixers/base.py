"""What every sequence mixer is: a causal map [B, T, D] -> [B, T, D] with named internal sites.

The contract, written down once (checked when a mixer is loaded, `MixerSpec.of`; its behaviour by
`mecheval check-mixer`, `mecheval.models.conformance`):
- `__init__(d_model, conv, options, layer_idx, max_len)`: `conv` is the block's `d_conv` (0, a kernel
  size k >= 1, or "long"); build the convolution with `shortconv.make_conv(conv, channels, max_len)`.
- `forward(x [B, T, D]) -> [B, T, D]`, causal: output t depends on inputs 0..t only.
- the recurrent form (optional): `init_state(B)` and `step(x_t [B, D], state) -> (y_t [B, D], state)`,
  equal to `forward` step by step.
- sites: every `Site` module anywhere inside the mixer is an intervention site named after its
  attribute (`layers.{i}.<name>`), carrying [B, T, D_site]; by convention `conv_out` (the conv's output,
  only where a conv exists) and `core_out` (the core's output before the output projection). Create
  them in the order forward visits them; use only a site's output (interventions patch it in place).
- class attributes, the published defaults of a block that uses it: `Options` (a `MixerOptions`),
  `default_conv`, `default_mlp`, `default_norm`, `positions` (learned position embeddings), `has_conv`,
  and `label` (the name reports give a plug-in).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from pydantic import ConfigDict
from torch import nn

from mecheval.common import Checked
from mecheval.models.shortconv import ConvSpec, validate_conv_spec
from mecheval.plugins import PluginError


class MixerOptions(Checked):
    """Per-mixer options; each mixer subclasses this (unknown fields are an error)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def ablations(cls, given: Mapping[str, Any]) -> list[str]:
        """The training ablations (and other named variants, such as Gated DeltaProduct's `gated`) among the
        options `given` (field -> value, as a config gives them): the names of the fields marked
        `json_schema_extra={"ablation": NAME}` that are set off their default, such as Mamba-3's `no two-token`,
        NAME formatted with the value where it has a field (DeltaProduct's `n_h = {:g}` -> `n_h = 1`); reports
        name an architecture with them (`models.presets.arch_label`)."""
        marked = {name: f for name, f in cls.model_fields.items()
                  if isinstance(f.json_schema_extra, dict) and "ablation" in f.json_schema_extra}
        return [f.json_schema_extra["ablation"].format(given[name]) for name, f in marked.items()
                if name in given and given[name] != f.default]

    def check(self, d_model: int) -> None:
        """ValueError naming the option where these options cannot build a mixer of width `d_model` (run when
        a config is validated); by default, an `n_heads` option must divide it. Extend it, calling super()."""
        heads = getattr(self, "n_heads", None)
        if isinstance(heads, int) and heads > 0 and d_model % heads:
            raise ValueError(f"n_heads={heads} does not divide d_model={d_model}")


class Mixer(nn.Module):
    """Base class. Subclasses implement the parallel `forward` and, where the mixer is a recurrence,
    `init_state` + `step` (the recurrent view); `recurrent` then runs the step form over a sequence.

    Internal sites (identity `Site` modules the LM names `layers.{i}.conv_out` / `layers.{i}.core_out`)
    are attributes `conv_out` (only where a convolution exists) and `core_out`.
    A mixer without a convolution slot sets `has_conv = False`; it then accepts only `conv == 0`.
    """

    has_conv: ClassVar[bool] = True
    Options: ClassVar[type[MixerOptions]] = MixerOptions
    default_conv: ClassVar[ConvSpec] = 0
    default_mlp: ClassVar[bool] = True
    default_norm: ClassVar[str] = "layernorm"
    positions: ClassVar[bool] = False  # True: the LM adds learned position embeddings (pos_emb default)
    label: ClassVar[str] = ""  # how reports name a plug-in ("" -> its class name in lower case)

    def __init__(self, d_model: int, conv: ConvSpec, options: MixerOptions, layer_idx: int, max_len: int):
        super().__init__()
        if conv != 0 and not self.has_conv:
            raise ValueError(f"{type(self).__name__} has no short convolution: d_conv must be 0, got {conv!r}")
        options.check(d_model)
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


NORMS = ("layernorm", "rmsnorm")


@dataclass(frozen=True)
class MixerSpec:
    """Registry entry: the class, its options, and the published defaults of a block that uses it."""

    cls: type[Mixer]
    options: type[MixerOptions]
    default_conv: ConvSpec  # the published short-conv kernel (0 where the mixer has none)
    default_mlp: bool = True
    default_norm: str = "layernorm"
    positions: bool = False  # the LM adds learned position embeddings by default

    @property
    def has_conv(self) -> bool:
        """False: the mixer has no convolution slot (d_conv must be 0)."""
        return self.cls.has_conv

    @property
    def has_recurrent(self) -> bool:
        """True where the mixer defines its step form (`init_state` + `step`)."""
        return self.cls.step is not Mixer.step and self.cls.init_state is not Mixer.init_state

    @classmethod
    def of(cls, obj: object, name: str) -> "MixerSpec":
        """The spec of a loaded plug-in `obj` (a `MixerSpec`, or a `Mixer` subclass whose class attributes
        give its defaults), checked against the contract; errors name `name` and what is missing."""
        spec = obj if isinstance(obj, MixerSpec) else None
        if spec is None:
            if not (isinstance(obj, type) and issubclass(obj, Mixer)):
                raise PluginError(f"mixer {name!r}: expected a subclass of mecheval.models.mixers.Mixer, got {obj!r}")
            spec = cls(obj, obj.Options, obj.default_conv, obj.default_mlp, obj.default_norm, obj.positions)
        problems = []
        if spec.cls.forward is Mixer.forward:
            problems.append("forward(x [B, T, D]) -> [B, T, D] is not defined")
        if (spec.cls.step is Mixer.step) != (spec.cls.init_state is Mixer.init_state):
            problems.append("the recurrent form needs both init_state and step")
        if not (isinstance(spec.options, type) and issubclass(spec.options, MixerOptions)):
            problems.append(f"Options must subclass MixerOptions, got {spec.options!r}")
        try:
            validate_conv_spec(spec.default_conv)
        except ValueError as e:
            problems.append(f"default_conv: {e}")
        if spec.default_conv != 0 and not spec.has_conv:
            problems.append(f"default_conv is {spec.default_conv!r} but has_conv is False")
        if spec.default_norm not in NORMS:
            problems.append(f"default_norm must be one of {NORMS}, got {spec.default_norm!r}")
        if problems:
            raise PluginError(f"mixer {name!r}: " + "; ".join(problems))
        return spec
