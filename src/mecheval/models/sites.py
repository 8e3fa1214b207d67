"""Named activation sites: identity modules that hooks attach to (in the spirit of hook points).

Every site carries a tensor [B, T, D_site]. `LM.sites()` maps names such as `layers.0.resid_pre` to
these modules. `attach` and `record` are scoped: hooks are removed on exit, even on error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping

import torch
from torch import nn

SiteFn = Callable[[torch.Tensor], torch.Tensor | None]


class Site(nn.Module):
    """Identity on [B, T, D_site]; `name` is its public name (set by the LM)."""

    def __init__(self) -> None:
        super().__init__()
        self.name = ""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def extra_repr(self) -> str:
        return self.name


@contextlib.contextmanager
def attach(sites: Mapping[str, Site], fns: Mapping[str, SiteFn]) -> Iterator[None]:
    """Within the block, site `name`'s output becomes `fns[name](x)` (unchanged where it returns None).

    Unknown names raise KeyError listing the known ones; hooks are always removed on exit.
    """
    unknown = sorted(set(fns) - set(sites))
    if unknown:
        raise KeyError(f"unknown sites {unknown}; known: {list(sites)}")
    handles = []
    try:
        for name, fn in fns.items():
            handles.append(sites[name].register_forward_hook(lambda _m, _i, out, fn=fn: fn(out)))
        yield
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def record(sites: Mapping[str, Site], names: list[str] | None = None) -> Iterator[dict[str, torch.Tensor]]:
    """Collects the output of each named site (all by default) into the yielded dict."""
    store: dict[str, torch.Tensor] = {}

    def saver(name: str) -> SiteFn:
        def save(x: torch.Tensor) -> None:
            store[name] = x

        return save

    with attach(sites, {n: saver(n) for n in (names if names is not None else list(sites))}):
        yield store
