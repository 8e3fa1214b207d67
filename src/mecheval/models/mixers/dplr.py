"""The frame shared by GLA, RWKV-7 and DeltaProduct: mixers whose core is the diagonal-plus-low-rank linear
recurrence of `ops.dplr` (S_t = (diag(w_t) + b_t a_t^T) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t, per head).

    δ_t = u_{t-1} - u_t                [B, T, D]: the token shift's difference (u_{-1} = 0), read only by
                                       RWKV-7's token shift; with `shifts` it passes the site `two_token`
                                       (zeroing it there ablates the shift: `interventions.terms`)
    c = project(u, δ)                  [B, T, C]: the channels the conv slot sees (`_project`)
    c = conv(c)                        the shared short-conv slot over the C channels (site `conv_out`);
                                       d_conv 0 removes it
    steps = recurrence(c, u, δ)        `DPLRInputs` over T · n steps (n = `substeps`: DeltaProduct's n_h
                                       delta steps per token; 1 otherwise)
    o = DPLR(steps)                    [B, T, H, d_v]: the output at each token's last step (site `state`,
                                       `DPLRState`: S after each token; site `core_out`: o, heads concatenated)
    y = out(o, steps, u, δ)            [B, T, D]
Training runs the chunkwise form (`ops.dplr.dplr`); the step form runs the same steps one by one from the
carried state (conv window, u_{t-1}, S [B, H, d_k, d_v]).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from mecheval.models.mixers.base import Mixer, MixerOptions
from mecheval.models.norms import RMSNorm
from mecheval.models.ops.dplr import (
    DPLRInputs,
    dplr,
    dplr_run,
    dplr_patch_response,
    dplr_state_at,
    dplr_states,
    dplr_states_response,
)
from mecheval.models.shortconv import ConvSpec, make_conv
from mecheval.models.sites import Site
from mecheval.models.states import MatrixState, StateSite


def _rows(x: torch.Tensor | None, rows: torch.Tensor) -> torch.Tensor | None:
    return None if x is None else x[rows]


def last_steps(n: int) -> slice:
    """The index of each token's last step along a steps axis of T n steps: step (t + 1) n - 1 for token t."""
    return slice(n - 1, None, n)


@dataclasses.dataclass(frozen=True)
class DPLRState(MatrixState):
    """S [H, d_k, d_v] after each token (its last step: step (t + 1) n - 1), by `ops.dplr`'s state forms;
    output: o [B, T, H, d_v]. Fields: the recurrence's inputs over the T n steps (q, k, v [B, T n, H, ·])."""

    log_w: torch.Tensor  # [B, T n, H, d_k or 1]
    a: torch.Tensor | None  # [B, T n, H, d_k]
    b: torch.Tensor | None
    substeps: int = 1

    def _step_of(self, pos: torch.Tensor) -> torch.Tensor:
        return (pos + 1) * self.substeps - 1

    def _reads(self, rows: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        """What a move of the state passes through, of rows [n]: q, log_w, a, b."""
        return tuple(_rows(x, rows) for x in (self.q, self.log_w, self.a, self.b))

    def _at(self, rows, pos):
        kvwab = (_rows(x, rows) for x in (self.k, self.v, self.log_w, self.a, self.b))
        return dplr_state_at(*kvwab, self._step_of(pos)).flatten(1)

    def _change(self, rows, pos, delta):
        dS = delta.view(len(rows), *self.k.shape[2:], self.v.shape[3])
        return dplr_patch_response(*self._reads(rows), dS, self._step_of(pos))[:, last_steps(self.substeps)]

    def _every(self, rows):
        kvwab = (_rows(x, rows) for x in (self.k, self.v, self.log_w, self.a, self.b))
        return dplr_states(*kvwab)[:, last_steps(self.substeps)].flatten(2)

    def _change_every(self, rows, delta):
        dS = delta.view(len(rows), delta.shape[1], *self.k.shape[2:], self.v.shape[3])
        moves = dS.new_zeros(len(rows), self.q.shape[1], *dS.shape[2:])
        moves[:, last_steps(self.substeps)] = dS
        return dplr_states_response(*self._reads(rows), moves)[:, last_steps(self.substeps)]


class GatedOutput(nn.Module):
    """y = W_o (RMSNorm_{d_v}(o) ⊙ SiLU(W_g u)): the gated output norm of GLA and (Gated) DeltaProduct, per
    head (fla's `FusedRMSNormGated`). o [..., H, d_v]; u [..., D] -> [..., D]."""

    def __init__(self, d_model: int, n_heads: int, d_v: int, eps: float):
        super().__init__()
        self.g_proj = nn.Linear(d_model, n_heads * d_v, bias=False)
        self.o_norm = RMSNorm(d_v, eps=eps)
        self.o_proj = nn.Linear(n_heads * d_v, d_model, bias=False)

    def forward(self, o: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        return self.o_proj(self.o_norm(o).flatten(-2) * F.silu(self.g_proj(u)))


class DPLRMixer(Mixer):
    """Subclasses build their parameters after `super().__init__(..., channels=C, heads=(H, d_k, d_v))` and
    define `_project`, `_recurrence` and `_out` (module docstring); `substeps` is n; `shifts`: the mixer reads
    the token shift's difference δ, which then passes the site `two_token`; `terms`: the names of further sites
    its `_recurrence` passes (such as DeltaProduct's `reflection`), registered between the conv and the state."""

    def __init__(self, d_model: int, conv: ConvSpec, options: MixerOptions, layer_idx: int, max_len: int, *,
                 channels: int, heads: tuple[int, int, int], substeps: int = 1, shifts: bool = False,
                 terms: tuple[str, ...] = ()):
        super().__init__(d_model, conv, options, layer_idx, max_len)
        self.n_heads, self.d_k, self.d_v = heads
        self.substeps, self.shifts = substeps, shifts
        if shifts:  # registered first: sites register in the order forward visits them
            self.two_token = Site()
        self.conv = make_conv(conv, channels, max_len)
        if self.conv is not None:
            self.conv_out = Site()
        for name in terms:
            setattr(self, name, Site())
        self.state = StateSite()
        self.core_out = Site()

    def _project(self, u: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        """u, the token shift's difference δ [B, T, D] -> the conv slot's channels [B, T, C]."""
        raise NotImplementedError

    def _recurrence(self, c: torch.Tensor, u: torch.Tensor, shift: torch.Tensor) -> DPLRInputs:
        """The conv slot's output c [B, T, C], the input u and δ [B, T, D] -> the recurrence's T · n steps."""
        raise NotImplementedError

    def _out(self, o: torch.Tensor, steps: DPLRInputs, u: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        """o [B, T, H, d_v], the steps, the input u and δ [B, T, D] -> y [B, T, D]."""
        raise NotImplementedError

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        shift = F.pad(u, (0, 0, 1, -1)) - u  # δ_t = u_{t-1} - u_t
        if self.shifts:
            shift = self.two_token(shift)
        c = self._project(u, shift)
        if self.conv is not None:
            c = self.conv_out(self.conv(c))
        steps = self._recurrence(c, u, shift)
        o = dplr(*steps)[:, last_steps(self.substeps)]
        o = self.state(DPLRState(o, *steps, substeps=self.substeps)).output
        o = self.core_out(o.flatten(-2)).unflatten(-1, (self.n_heads, self.d_v))
        return self._out(o, steps, u, shift)

    def init_state(self, batch_size: int, device=None, dtype=None):
        """(conv state or None, u_{t-1} [B, D] zeros, S [B, H, d_k, d_v] zeros)."""
        conv = None if self.conv is None else self.conv.init_state(batch_size, device=device, dtype=dtype)
        u_prev = torch.zeros(batch_size, self.d_model, device=device, dtype=dtype)
        return conv, u_prev, torch.zeros(batch_size, self.n_heads, self.d_k, self.d_v, device=device, dtype=dtype)

    def step(self, u_t: torch.Tensor, state):
        conv_state, u_prev, S = state
        shift = u_prev - u_t
        c = self._project(u_t, shift)
        if self.conv is not None:
            c, conv_state = self.conv.step(c, conv_state)
        u, shift = u_t[:, None], shift[:, None]  # this token as a sequence of one
        steps = self._recurrence(c[:, None], u, shift)  # its n steps
        o, S = dplr_run(steps, S)
        return self._out(o[:, -1:], steps, u, shift)[:, 0], (conv_state, u_t, S)
