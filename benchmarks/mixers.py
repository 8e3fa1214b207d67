"""Forward+backward tokens/s of every published architecture's blocks on CPU, beside references.

For each preset of `mecheval.models.ARCHITECTURES` at the published width (d=64, 2 layers, B=32)
and each T, every implementation maps a residual stream x [B, T, D] through the 2 blocks
(norm, mixer, MLP where the preset has one); one timed call is forward, `sum().backward()`.
Implementations (`IMPLEMENTATIONS`, a list of (name, factory); add a column by appending one):
    ours     the LM's blocks, parallel/chunked training forward
    step     the same blocks with each mixer's per-step recurrent form (`Mixer.recurrent`)
    mambapy  the Mamba reference of alxndrTL/mamba.py (parallel scan), matched d_state/d_conv/expand
    masked   attention as the explicit quadratic form softmax(QK^T/sqrt(d_h) + causal mask) V
    reference  our blocks with the pure-PyTorch ops instead of the fused CPU kernels that `ours`
             uses by default (`MECHEVAL_KERNELS=reference`: the selective scan, the short conv, H3's
             diagonal SSM, the delta rule)
Ratios are ours / reference (> 1: ours is faster). Every cell runs in a fresh process whose
address space is capped (`--max-gb`): a cell that needs more (per-step forms keep every step's
state for backward) shows "OOM" instead of taking the machine down.

    python benchmarks/mixers.py [--T 37 --T 256] [--mixers mamba --mixers based] [--repeats 3]
"""

from __future__ import annotations

import multiprocessing
import resource
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import torch
import typer
from rich.console import Console
from rich.table import Table
from torch import nn

from common import median_seconds
from mecheval.models import ARCHITECTURES, MIXERS, ModelConfig, build_model
from mecheval.models.ops.dispatch import kernel_mode

D_MODEL, N_LAYERS, BATCH, VOCAB = 64, 2, 32, 64
Factory = Callable[[ModelConfig], nn.Module | None]  # None: no such implementation for this config


def ours(cfg: ModelConfig) -> nn.Module:
    return nn.Sequential(*build_model(cfg).layers)


class StepForm(nn.Module):
    """A mixer run through its recurrent view, one step at a time (with autograd)."""

    def __init__(self, mixer: nn.Module) -> None:
        super().__init__()
        self.inner = mixer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner.recurrent(x)


def with_mixers(cfg: ModelConfig, wrap: Callable[[nn.Module], nn.Module]) -> nn.Module:
    """Our blocks with every mixer replaced by `wrap(mixer)` (same weights, another form)."""
    blocks = ours(cfg)
    for block in blocks:
        block.mixer = wrap(block.mixer)
    return blocks


def per_step(cfg: ModelConfig) -> nn.Module | None:
    return with_mixers(cfg, StepForm) if all(MIXERS[m].has_recurrent for m in cfg.mixer) else None


class MaskedAttention(nn.Module):
    """An `Attention` mixer's weights in the textbook quadratic form (scores [B, H, T, T] materialised)."""

    def __init__(self, attn: nn.Module) -> None:
        super().__init__()
        self.inner = attn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = (self.inner._heads(z) for z in self.inner.qkv(x).split(D, dim=-1))  # [B, H, T, d_h]
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        return self.inner.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D))


def masked_attention(cfg: ModelConfig) -> nn.Module | None:
    return with_mixers(cfg, MaskedAttention) if set(cfg.mixer) == {"attention"} else None


def mambapy_ref(cfg: ModelConfig) -> nn.Module | None:
    if set(cfg.mixer) != {"mamba"}:
        return None
    from mambapy.mamba import Mamba, MambaConfig

    opts = cfg.mixer_options("mamba")
    ref = MambaConfig(
        d_model=cfg.d_model, n_layers=cfg.n_layers, d_state=opts.d_state, d_conv=cfg.d_conv[0], expand_factor=opts.expand
    )
    return Mamba(ref)


class ReferenceKernels(nn.Module):
    """A mixer whose dispatched ops take their pure-PyTorch path."""

    def __init__(self, mixer: nn.Module) -> None:
        super().__init__()
        self.inner = mixer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with kernel_mode("reference"):
            return self.inner(x)


def reference_kernels(cfg: ModelConfig) -> nn.Module:
    return with_mixers(cfg, ReferenceKernels)


IMPLEMENTATIONS: list[tuple[str, Factory]] = [
    ("ours", ours),
    ("step", per_step),
    ("mambapy", mambapy_ref),
    ("masked", masked_attention),
    ("reference", reference_kernels),
]


def tokens_per_second(model: nn.Module, T: int, repeats: int, budget_s: float) -> float:
    """Forward+backward tokens/s of `model` on x [BATCH, T, D_MODEL]."""
    x = torch.randn(BATCH, T, D_MODEL, generator=torch.Generator().manual_seed(0), requires_grad=True)

    def fwd_bwd() -> None:
        model.zero_grad(set_to_none=True)
        x.grad = None
        model(x).sum().backward()

    return BATCH * T / median_seconds(fwd_bwd, repeats=repeats, budget_s=budget_s)


def _cell(cfg_json: str, impl: str, T: int, repeats: int, budget_s: float, threads: int, max_gb: float):
    """One table cell, in a fresh process with a capped address space -> tokens/s or "OOM"."""
    if threads:
        torch.set_num_threads(threads)
    resource.setrlimit(resource.RLIMIT_AS, (int(max_gb * 2**30), resource.getrlimit(resource.RLIMIT_AS)[1]))
    torch.manual_seed(0)
    model = dict(IMPLEMENTATIONS)[impl](ModelConfig.model_validate_json(cfg_json))
    try:
        return tokens_per_second(model, T, repeats, budget_s)
    except RuntimeError as e:  # the allocator, or oneDNN, out of (capped) memory
        if "can't allocate memory" in str(e) or "could not create a primitive" in str(e):
            return "OOM"
        raise


def measure(cfg: ModelConfig, impl: str, T: int, *args) -> float | str:
    """`_cell` in a fresh process ("—" where `impl` does not apply to `cfg`)."""
    if dict(IMPLEMENTATIONS)[impl](cfg) is None:
        return "—"
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        try:
            return pool.submit(_cell, cfg.model_dump_json(), impl, T, *args).result()
        except BrokenProcessPool:  # killed (e.g. by the kernel's OOM killer)
            return "OOM"


def ratio(a: float | str, b: float | str) -> str:
    return f"{a / b:.2f}" if isinstance(a, float) and isinstance(b, float) else "—"


def main(
    T: list[int] = typer.Option([37, 256, 1024], "--T", help="sequence lengths"),
    mixers: list[str] = typer.Option(list(ARCHITECTURES), "--mixers", help="presets of ARCHITECTURES"),
    repeats: int = typer.Option(3, help="timed calls per cell (median); one untimed warmup before"),
    budget: float = typer.Option(30.0, help="seconds of timed calls per cell before stopping early"),
    threads: int = typer.Option(0, help="torch threads (0: torch's default)"),
    max_gb: float = typer.Option(6.0, help="address-space cap of this process, GiB"),
) -> None:
    unknown = sorted(set(mixers) - set(ARCHITECTURES))
    if unknown:
        raise typer.BadParameter(f"unknown presets {unknown}; known: {list(ARCHITECTURES)}", param_hint="--mixers")
    refs = [name for name, _ in IMPLEMENTATIONS[1:]]
    table = Table(
        title=f"forward+backward tokens/s, d={D_MODEL}, {N_LAYERS} layers, B={BATCH}, "
        f"{threads or torch.get_num_threads()} threads, median of {repeats}"
    )
    for col in ["mixer", "T", *(name for name, _ in IMPLEMENTATIONS), *(f"ours/{r}" for r in refs)]:
        table.add_column(col, justify="left" if col == "mixer" else "right")
    console = Console(width=None if sys.stdout.isatty() else 200)  # a log keeps the whole table
    for preset in mixers:
        cfg = ModelConfig(preset=preset, vocab_size=VOCAB, d_model=D_MODEL, n_layers=N_LAYERS, max_len=max(T))
        for t in T:
            rates = {name: measure(cfg, name, t, repeats, budget, threads, max_gb) for name, _ in IMPLEMENTATIONS}
            cells = [r if isinstance(r, str) else f"{r:,.0f}" for r in rates.values()]
            ratios = [ratio(rates["ours"], rates[r]) for r in refs]
            table.add_row(preset, str(t), *cells, *ratios)
            console.print(f"{preset} T={t}: " + ", ".join(f"{k} {c}" for k, c in zip(rates, cells)), highlight=False)
    console.print(table)


if __name__ == "__main__":
    typer.run(main)
