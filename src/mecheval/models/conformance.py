"""The conformance suite of a mixer (`mecheval check-mixer IMPORT_PATH`); the zoo is tested with it too.

`check_mixer(name)` -> one `Check` per property, each passed, failed (with the reason) or skipped:
  contract    the class loads and keeps the contract of `mixers.base` (checked at load)
  shape       forward maps [B, T, D] -> [B, T, D]
  causal      changing inputs after t leaves every output up to t unchanged (at every d_conv of the slot)
  recurrent   the step form (init_state + step) equals the parallel form (where a step form exists)
  gradients   every parameter gets a finite, non-zero gradient
  sites       every `Site` in the mixer is named `layers.0.<attr>`, visited by forward in the order it
              is registered (the order `LM.sites()` lists), [B, T, D_site]; a `StateSite` carries a
              `StateValue` whose state patched with itself at every position changes nothing, whose
              `every()` is `at()` at each position and whose `first_order_every` is the derivative
              of the single patch
  conv slot   d_conv 0: no conv parameters, no `conv_out`; k: exactly the k taps per channel; "long":
              builds and runs (a mixer without a slot refuses d_conv != 0)
  learns      a 2-layer LM of the mixer fits a fixed batch of 2-pair AR (`learn=False` skips it)
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mecheval.models.config import ModelConfig
from mecheval.models.lm import build_model
from mecheval.models.longconv import LongConv
from mecheval.models.mixers import Mixer, MixerSpec, mixer_spec
from mecheval.models.shortconv import ConvSpec, ShortConv
from mecheval.models.sites import Site, record
from mecheval.models.states import StateValue

B, T, D = 2, 24, 16
CONV_KS = (1, 3)  # the short kernels the slot is checked at
ATOL = 1e-4  # two forms of the same math, float32
LEARN_STEPS, LEARN_LOSS = 400, 0.1


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "pass" | "fail" | "skip"
    reason: str = ""


class Failed(Exception):
    """A property does not hold; the message is the reason shown in the table."""


def check_mixer(name: str, *, learn: bool = True, options: dict | None = None, seed: int = 0) -> list[Check]:
    """Every check of the suite on mixer `name` (a zoo name or an import path), with `options`."""
    try:
        spec = mixer_spec(name)
        spec.options(**(options or {}))
    except ValueError as e:
        return [Check("contract", "fail", one_line(e))]
    suite = Suite(name, spec, options or {}, seed)
    checks = [Check("contract", "pass")]
    for check, fn in [("shape", suite.shape), ("causal", suite.causal), ("recurrent", suite.recurrent),
                      ("gradients", suite.gradients), ("sites", suite.sites), ("conv slot", suite.conv_slot),
                      ("learns", suite.learns if learn else None)]:
        checks.append(run_check(check, fn))
    return checks


def run_check(name: str, fn: Callable[[], str | None] | None) -> Check:
    """fn() returns None (pass) or a reason to skip; raising fails the check with the error as reason."""
    if fn is None:
        return Check(name, "skip", "not run (--no-learn)")
    try:
        skipped = fn()
    except Failed as e:
        return Check(name, "fail", str(e))
    except Exception as e:  # the mixer's own error is the reason
        return Check(name, "fail", f"{type(e).__name__}: {one_line(e)}")
    return Check(name, "skip", skipped) if skipped else Check(name, "pass")


def one_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip() and "errors.pydantic.dev" not in ln]
    return " ".join(lines)


class Suite:
    def __init__(self, name: str, spec: MixerSpec, options: dict, seed: int) -> None:
        self.name, self.spec, self.options, self.seed = name, spec, options, seed
        self.x = torch.randn(B, T, D, generator=torch.Generator().manual_seed(seed))

    @property
    def convs(self) -> tuple[ConvSpec, ...]:
        """The d_conv values checked: the default and, where the mixer has a slot, 0, CONV_KS and "long"."""
        slot = (0, *CONV_KS, "long") if self.spec.has_conv else (0,)
        return tuple(dict.fromkeys((self.spec.default_conv, *slot)))

    def mixer(self, conv: ConvSpec | None = None) -> Mixer:
        torch.manual_seed(self.seed)
        conv = self.spec.default_conv if conv is None else conv
        return self.spec.cls(D, conv, self.spec.options(**self.options), 0, T)

    def shape(self) -> None:
        y = self.mixer()(self.x)
        if tuple(y.shape) != (B, T, D):
            raise Failed(f"forward maps [{B}, {T}, {D}] to {list(y.shape)}, not [{B}, {T}, {D}]")

    @torch.no_grad()
    def causal(self) -> None:
        for conv in self.convs:
            m = self.mixer(conv)
            y = m(self.x)
            for t in (0, T // 3, T - 2):
                x2 = self.x.clone()
                x2[:, t + 1:] = torch.randn_like(x2[:, t + 1:])
                diff = (m(x2)[:, : t + 1] - y[:, : t + 1]).abs().max().item()
                if diff > ATOL * (1 + y.abs().max().item()):
                    raise Failed(f"d_conv {conv}: outputs up to t={t} change by {diff:.2g} when only later inputs change")

    @torch.no_grad()
    def recurrent(self) -> str | None:
        if not self.spec.has_recurrent:
            return "no step form (init_state + step)"
        for conv in dict.fromkeys((self.spec.default_conv, 0)):
            m = self.mixer(conv)
            par, rec = m(self.x), m.recurrent(self.x)
            err = (rec - par).abs().amax(dim=(0, 2))  # [T]
            bad = (err > ATOL * (1 + par.abs().max())).nonzero()
            if len(bad):
                t = bad[0].item()
                raise Failed(f"d_conv {conv}: the step form differs from the parallel form from t={t} "
                             f"(max |diff| {err.max().item():.2g})")
        return None

    def gradients(self) -> None:
        m = self.mixer()
        x = self.x.clone().requires_grad_()
        m(x).square().mean().backward()
        none = [n for n, p in m.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
        bad = [n for n, p in m.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
        if none or bad:
            raise Failed("; ".join([f"no gradient reaches {', '.join(none)}"] * bool(none)
                                   + [f"non-finite gradient in {', '.join(bad)}"] * bool(bad)))
        if not (x.grad.abs().sum() > 0):
            raise Failed("no gradient reaches the input")

    def sites(self) -> None:
        for conv in dict.fromkeys((self.spec.default_conv, 0)):
            torch.manual_seed(self.seed)
            lm = build_model(ModelConfig(vocab_size=8, d_model=D, n_layers=1, max_len=T, mixer=self.name,
                                         d_conv=conv, options={self.name: self.options}))
            inner = {f"layers.0.mixer.{p}": s for p, s in lm.layers[0].mixer.named_modules() if isinstance(s, Site)}
            named = {s.name for s in inner.values()}
            if len(named) != len(inner) or not all(n.startswith("layers.0.") for n in named):
                raise Failed(f"d_conv {conv}: sites {sorted(inner)} are not all named layers.0.<name>")
            listed = [n for n in lm.sites() if n in named]
            with record(lm.sites(), listed) as seen:
                lm(torch.zeros(B, T, dtype=torch.long))
            unvisited = sorted(named - set(seen))
            if unvisited:
                raise Failed(f"d_conv {conv}: forward never passes through site(s) {', '.join(unvisited)}")
            if list(seen) != listed:  # `record` stores in the order forward visits the sites
                raise Failed(f"d_conv {conv}: forward visits the sites in the order {list(seen)}, not in the order "
                             f"they are registered, {listed} (create the Site modules in forward order)")
            for n in sorted(named):
                if isinstance(seen[n], StateValue):
                    self._state_is_consistent(n, seen[n])
                    self._first_order_is_the_derivative(lm, n)
                elif seen[n].dim() < 3 or tuple(seen[n].shape[:2]) != (B, T):
                    raise Failed(f"site {n} carries {list(seen[n].shape)}, not [B={B}, T={T}, D_site] (or [B, T, ...])")
            has_conv_out = "layers.0.conv_out" in named
            if has_conv_out != (conv != 0):
                raise Failed(f"d_conv {conv}: {'a' if has_conv_out else 'no'} conv_out site")
            if conv == self.spec.default_conv and "layers.0.core_out" not in named:
                raise Failed("no core_out site (the core's output before the output projection)")

    @staticmethod
    def _state_is_consistent(name: str, value: StateValue) -> None:
        rows = torch.arange(B)
        every = value.every()
        for t in range(T):
            pos = torch.full((B,), t)
            h = value.at(rows, pos)
            if tuple(h.shape) != (B, value.size):
                raise Failed(f"state site {name}: at() gives {list(h.shape)}, not [B={B}, D_state={value.size}]")
            if not torch.allclose(every[:, t], h, atol=ATOL, rtol=ATOL):
                raise Failed(f"state site {name}: every()[:, {t}] is not at() at {t}")
            moved = value.patched(rows, pos, h).output
            if not torch.allclose(moved, value.output, atol=ATOL, rtol=ATOL):
                raise Failed(f"state site {name}: patching the state after {t} with itself changes the output")

    @staticmethod
    def _first_order_is_the_derivative(lm, name: str) -> None:
        """`first_order_every(source, [g])[:, t]` (what attribution patching uses) is the derivative of
        ⟨output, g⟩ along the single patch h_t -> h_t + ε (h'_t − h_t) (central differences, float64)."""
        lm = copy.deepcopy(lm).double()
        with torch.no_grad(), record(lm.sites(), [name]) as seen:
            lm(torch.arange(B * T).view(B, T) % 8)
            source = seen[name]
            lm(torch.zeros(B, T, dtype=torch.long))
        value, rows, eps = seen[name], torch.arange(B), 1e-4
        g = torch.randn(value.output.shape, dtype=value.output.dtype, generator=torch.Generator().manual_seed(0))
        (first,) = value.detached().first_order_every(source.detached(), [g])
        for t in range(T):
            pos = torch.full((B,), t)
            d = source.at(rows, pos) - value.at(rows, pos)
            moved = [(value.respond(rows, pos, s * eps * d) * g).flatten(1).sum(1) for s in (1, -1)]
            slope = (moved[0] - moved[1]) / (2 * eps)
            if not torch.allclose(first[:, t], slope, atol=1e-6, rtol=1e-4):
                raise Failed(f"state site {name}: first_order_every()[:, {t}] = {first[:, t].tolist()} is not the "
                             f"derivative along the patch at {t}, {slope.tolist()}")

    def conv_slot(self) -> str | None:
        if not self.spec.has_conv:
            try:
                self.mixer(1)
            except ValueError:
                return "no convolution slot (d_conv 1 refused, as it must be)"
            raise Failed("has_conv is False but d_conv 1 builds")
        n0, conv0 = count(self.mixer(0))
        if conv0:
            raise Failed(f"d_conv 0 keeps {conv0} short-convolution parameters")
        for k in CONV_KS:
            m = self.mixer(k)
            n, convs = count(m)
            short = [c for c in m.modules() if isinstance(c, ShortConv)]
            if not short or any(c.kernel_size != k for c in short):
                raise Failed(f"d_conv {k}: no ShortConv of kernel {k} (build it with shortconv.make_conv)")
            if n - n0 != convs or convs != sum(c.channels * k for c in short):
                raise Failed(f"d_conv {k}: {n - n0} parameters more than d_conv 0, expected the {convs} conv taps")
        long = self.mixer("long")
        if n_long(long) <= n_long(self.mixer(0)):
            raise Failed('d_conv "long": no LongConv in the slot (build it with shortconv.make_conv)')
        long(self.x)
        return None

    def learns(self) -> None:
        from mecheval.tasks import make_task

        task = make_task("ar", n_pairs=2, n_keys=8, n_values=8)
        batch = task.sample(32, seed=self.seed)
        torch.manual_seed(self.seed)
        lm = build_model(ModelConfig(vocab_size=task.vocab_size, d_model=32, n_layers=2, max_len=batch.tokens.shape[1],
                                     mixer=self.name, options={self.name: self.options}))
        opt = torch.optim.AdamW(lm.parameters(), lr=3e-3, weight_decay=0.0)
        for _ in range(LEARN_STEPS):
            loss = F.cross_entropy(lm(batch.tokens, positions=batch.answer_pos), batch.answer)
            if loss.item() < LEARN_LOSS:
                return
            opt.zero_grad()
            loss.backward()
            opt.step()
        raise Failed(f"loss {loss.item():.2f} after {LEARN_STEPS} steps on 32 examples of 2-pair AR (target < {LEARN_LOSS})")


def count(m: torch.nn.Module) -> tuple[int, int]:
    """(all parameters, short-convolution parameters) of a mixer."""
    conv = sum(p.numel() for c in m.modules() if isinstance(c, ShortConv) for p in c.parameters())
    return sum(p.numel() for p in m.parameters()), conv


def n_long(m: torch.nn.Module) -> int:
    return sum(isinstance(c, LongConv) for c in m.modules())
