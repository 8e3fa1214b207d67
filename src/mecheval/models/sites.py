"""Named activation sites: identity modules that hooks attach to (in the spirit of hook points).

Every site carries a tensor [B, T, ...] (position second: [B, T, D_site] for most; attention's
`attn_pattern` [B, T_query, H, T_key]). `LM.sites()` maps names such as `layers.0.resid_pre` to
these modules. `attach` and `record` are scoped: hooks are removed on exit, even on error;
`run_with_cache` is one forward pass returning the logits and the activations by site name.
"""

from __future__ import annotations

import contextlib
import fnmatch
from collections.abc import Callable, Iterator, Mapping

import torch
from torch import nn

SiteFn = Callable[[torch.Tensor], torch.Tensor | None]
_ATTACHED = [0]  # `attach` scopes open now: a run inside one is observed (attention then computes its weights)


def observed() -> bool:
    """Is a run inside an `attach` (or `record`, `run_with_cache`) scope? Mixers with a fused kernel that hides
    a site (attention's SDPA hides its pattern and heads) take their explicit path there, so that every run of
    an intervention takes the same path; plain runs (training, evaluation) keep the fused kernel."""
    return _ATTACHED[0] > 0


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
    _ATTACHED[0] += 1
    try:
        for name, fn in fns.items():
            handles.append(sites[name].register_forward_hook(lambda _m, _i, out, fn=fn: fn(out)))
        yield
    finally:
        _ATTACHED[0] -= 1
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


def matches(names: list[str], pattern: str) -> list[str]:
    """The names a glob matches (`layers.*.attn_pattern`; a bare kind `resid_pre` means `layers.*.resid_pre`)."""
    return fnmatch.filter(names, pattern if "." in pattern else f"layers.*.{pattern}")


def select(sites: Mapping[str, Site], patterns: list[str] | None) -> list[str]:
    """Site names matching any glob (`layers.*.attn_pattern`; a bare kind `resid_pre` means
    `layers.*.resid_pre`), in forward order; all where `patterns` is None. KeyError on a pattern matching none."""
    names = list(sites)
    if patterns is None:
        return names
    hits = set()
    for pattern in patterns:
        found = matches(names, pattern)
        if not found:
            raise KeyError(f"site pattern {pattern!r} matches no site; known: {names}")
        hits.update(found)
    return [n for n in names if n in hits]


@torch.no_grad()
def run_with_cache(lm, tokens: torch.Tensor, names: list[str] | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One forward pass of `lm` on tokens [B, T] -> (logits [B, T, V], {site name: activation}).

    names: site names or globs (default: every site). Activations are detached, [B, T, ...] (a state
    site's is a `StateValue`: `.at(rows, positions)` computes the state after given positions). The run is
    observed (`observed`): attention computes its weights explicitly, so its pattern and head sites exist."""
    with record(lm.sites(), select(lm.sites(), names)) as cache:
        logits = lm(tokens)
    return logits, dict(cache)
