"""The architectures of the published study, as partial `ModelConfig`s (use `ModelConfig(preset=...)`).

Source: the documentation's published setup (docs/published.md, "Models as published"). Fields a user sets explicitly
override these; every mixer's own defaults (d_conv, MLP, norm) come from its MixerSpec.
"""

from collections.abc import Sequence

ARCHITECTURES: dict[str, dict] = {
    "attention": {"mixer": "attention"},
    "mamba": {"mixer": "mamba"},
    "deltanet": {"mixer": "deltanet"},
    "h3": {"mixer": "h3"},
    "hyena": {"mixer": "hyena"},
    # BaseConv: layer 0 short conv 3, layer 1 an implicit long convolution.
    "baseconv": {"mixer": "baseconv", "d_conv": [3, "long"]},
    # Based: layer 0 BaseConv (short conv 3), layer 1 Based linear attention.
    "based": {"mixer": ["baseconv", "based"], "d_conv": [3, None]},
    # Modern mixers (not in the published study), each with its own paper's block defaults.
    "mamba2": {"mixer": "mamba2"},
    "mamba3": {"mixer": "mamba3"},  # no short conv (d_conv 0); a conv as an ablation
    "gated-deltanet": {"mixer": "gated-deltanet"},
    "gla": {"mixer": "gla"},
    "rwkv7": {"mixer": "rwkv7"},
    "deltaproduct": {"mixer": "deltaproduct"},
}


PUBLISHED_LAYERS = 2


def arch_label(name: str, conv: int | str | None, layers: int | None = None, positions: str | None = None,
               ablations: Sequence[str] = ()) -> str:
    """How reports name an architecture: `mamba`, or `mamba (d_conv 0)` where its convolution differs
    from the published default (`conv` None where it does not), `attention (1 layer)` where its depth
    differs from the published 2 (`layers`), `attention (no positions)` / `based (positions)` where its
    position embedding does (`positions`: "none" / "learned"), `mamba3 (no two-token)` where it was trained
    with a mixer's term ablated (`ablations`: `MixerOptions.ablations`)."""
    parts = [f"d_conv {conv}"] if conv is not None else []
    parts += [f"{layers} layer{'s' if layers > 1 else ''}"] if layers is not None else []
    parts += [{"none": "no positions", "learned": "positions"}[positions]] if positions is not None else []
    parts += list(ablations)
    return name + (f" ({', '.join(parts)})" if parts else "")
