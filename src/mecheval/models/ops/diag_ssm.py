"""A diagonal (complex) linear time-invariant SSM, per channel h with M complex modes (S4D; Gu et al., 2022):

    x_t = dA ⊙ x_{t-1} + dB u_t          x: [..., H, M] complex
    y_t = 2 Re(C · x_t)                   (the modes stand for M conjugate pairs, a real state of 2M)

Unrolled, y = K * u, a causal convolution with the kernel K_l = 2 Re(Σ_m C_m dB_m dA_m^l)  [T, H].
Shapes: u: [B, T, H, *E] real (E: extra dims sharing channel h's SSM); dA, dB, C: [H, M] complex.
`diag_ssm` (training) computes K and convolves by FFT; `diag_ssm_step` / `diag_ssm_loop` are the
recurrence and its per-step reference.
"""

from __future__ import annotations

import math

import torch

from mecheval.models.ops.fft_conv import fft_conv
from mecheval.models.ops.straddle import straddle_sum


def _powers(dA, n: int, step: int = 1) -> torch.Tensor:
    """dA^(step k) for k < n, as |dA|^l (cos lθ + i sin lθ) in float64 (l θ must stay accurate for l up
    to T; real transcendental ops are also much faster than complex ones on CPU): [n, H, M] complex128."""
    z = dA.to(torch.complex128)
    ell = step * torch.arange(n, device=z.device, dtype=torch.float64)[:, None, None]
    return torch.polar(torch.exp(torch.log(z.abs()) * ell), z.angle() * ell)


def diag_ssm_kernel(dA, dB, C, T: int) -> torch.Tensor:
    """K_l = 2 Re(Σ_m C_m dB_m dA_m^l), l < T -> [T, H].

    With l = I j + i (I ~ sqrt T): K = 2 Re((C dB dA^{I j}) @ dA^i), one real matmul over the modes
    (real and imaginary parts stacked), never a [H, M, T] tensor; powers by `_powers`.
    """
    I = math.isqrt(T - 1) + 1 if T > 1 else 1
    J = -(-T // I)
    c = (C * dB).to(torch.complex128)  # [H, M]
    inner, outer = _powers(dA, I).permute(1, 2, 0), _powers(dA, J, I).permute(1, 2, 0)  # dA^i, dA^{I j}: [H, M, n]
    inner_re, inner_im, outer_re, outer_im = inner.real, inner.imag, outer.real, outer.imag
    cr, ci = c.real[..., None], c.imag[..., None]
    left = torch.cat([cr * outer_re - ci * outer_im, -(cr * outer_im + ci * outer_re)], dim=1)  # [H, 2M, J]
    K = 2 * left.transpose(1, 2) @ torch.cat([inner_re, inner_im], dim=1)  # [H, J, I]
    return K.reshape(K.shape[0], J * I)[:, :T].T.to(dA.real.dtype)


def bilinear(log_dt, log_A_real, A_imag, B, C):
    """S4D-Lin's parameters, discretised bilinearly: A = -exp(log_A_real) + i A_imag, Δ = exp(log_dt),
        dA = (1 + ΔA/2) / (1 - ΔA/2) = 2 inv - 1,   dB = Δ B inv,   inv = 1 / (1 - ΔA/2).
    log_dt [H]; log_A_real, A_imag [H, M]; B, C [H, M, 2] (real and imaginary parts) -> dA, dB, C [H, M] complex."""
    dt = torch.exp(log_dt)[:, None]
    dtA = dt * torch.complex(-torch.exp(log_A_real), A_imag)
    inv = 1 / (1 - dtA / 2)  # one complex division, not two
    return 2 * inv - 1, torch.view_as_complex(B) * dt * inv, torch.view_as_complex(C)


def with_skip(K: torch.Tensor, D: torch.Tensor | None) -> torch.Tensor:
    """K [T, H] with the skip D [H] added at lag 0, so that K * u = SSM(u) + D u (K itself for D None)."""
    return K if D is None else torch.cat([K[:1] + D.to(K.dtype), K[1:]])


def diag_ssm(u, dA, dB, C, D=None):
    """The SSM over a whole sequence by FFT convolution with its kernel, plus the skip D [H] ⊙ u when given:
    u [B, T, H, *E] -> y like u."""
    K = with_skip(diag_ssm_kernel(dA, dB, C, u.shape[1]), D)  # [T, H]
    E = math.prod(u.shape[3:])  # channel h's kernel serves its E entries
    return fft_conv(u.flatten(2), K.repeat_interleave(E, dim=1)).view_as(u)


def _modes(p: torch.Tensor, extra: int) -> torch.Tensor:
    """[H, M] -> [H, 1 (extra times), M], to broadcast against a state [B, H, *E, M]."""
    return p.reshape(p.shape[0], *[1] * extra, p.shape[1])


def diag_ssm_step(u_t, dA, dB, C, x):
    """One step: u_t [B, H, *E] real, x [B, H, *E, M] complex -> (y_t [B, H, *E], new x)."""
    e = u_t.dim() - 2
    x = _modes(dA, e) * x + _modes(dB, e) * u_t[..., None]
    return 2 * (_modes(C, e) * x).sum(-1).real, x


def diag_ssm_init_state(u_shape_t, M: int, dtype, device=None) -> torch.Tensor:
    """Zero state for inputs of per-step shape [B, H, *E]: [B, H, *E, M] complex."""
    cdtype = torch.complex128 if dtype == torch.float64 else torch.complex64
    return torch.zeros(*u_shape_t, M, dtype=cdtype, device=device)


def diag_ssm_loop(u, dA, dB, C):
    """Plain per-step loop (the reference): u [B, T, H, *E] -> y like u."""
    x = diag_ssm_init_state(u[:, 0].shape, dA.shape[1], u.dtype, u.device)
    ys = []
    for t in range(u.shape[1]):
        y, x = diag_ssm_step(u[:, t], dA, dB, C, x)
        ys.append(y)
    return torch.stack(ys, dim=1)


def _complex(real_dtype) -> torch.dtype:
    return torch.complex128 if real_dtype == torch.float64 else torch.complex64


def diag_ssm_state_at(u, dA, dB, pos):
    """The state after pos (one per row): x_t = Σ_{r<=t} dA^{t-r} dB u_r, one kernel per distinct pos.
    u [n, T, H, *E] real; dA, dB [H, M] complex; pos [n] -> x [n, H, *E, M] complex."""
    n, T, H = u.shape[:3]
    P = _powers(dA, T).to(_complex(u.dtype))
    flat = u.reshape(n, T, H, -1).to(P.dtype)
    x = flat.new_zeros(n, H, flat.shape[-1], P.shape[-1])
    for t in pos.unique().tolist():
        rows = (pos == t).nonzero()[:, 0]
        K = P[: t + 1].flip(0) * dB.to(P.dtype)  # K_r = dA^{t-r} dB, r <= t
        x = x.index_put((rows,), torch.einsum("nrhe,rhm->nhem", flat[rows, : t + 1], K))
    return x.view(n, *u.shape[2:], P.shape[-1])


def diag_ssm_state_response(dA, C, T: int, pos, dx):
    """The change of y when the state after pos moves by dx [n, H, *E, M] complex: for s > pos,
    Δy_s = 2 Re(Σ_m C_m dA_m^{s-pos} dx_m), 0 for s <= pos -> [n, T, H, *E] real."""
    n, H, M = dx.shape[0], dx.shape[1], dx.shape[-1]
    P = _powers(dA, T).to(dx.dtype)
    flat = dx.reshape(n, H, -1, M)
    y = flat.real.new_zeros(n, T, H, flat.shape[2])
    for t in pos.unique().tolist():
        if t + 1 >= T:
            continue
        rows = (pos == t).nonzero()[:, 0]
        K = P[1 : T - t] * C.to(P.dtype)  # C dA^{s-t}, s = t+1 .. T-1
        change = 2 * torch.einsum("nhem,shm->nshe", flat[rows], K).real
        y = y.index_put((rows[:, None], torch.arange(t + 1, T, device=y.device)[None]), change)
    return y.view(n, T, *dx.shape[1:-1])


def diag_ssm_states(u, dA, dB):
    """The state after every t, by the recurrence: u [n, T, H, *E] real -> x [n, T, H, *E, M] complex."""
    e = u.dim() - 3
    a, b = _modes(dA, e).to(_complex(u.dtype)), _modes(dB, e).to(_complex(u.dtype))
    x, xs = 0, []
    for u_t in u.unbind(1):
        x = a * x + b * u_t[..., None]
        xs.append(x)
    return torch.stack(xs, dim=1)


def diag_ssm_states_response(dA, C, dx):
    """The change of y when the state after every t moves by dx[:, t] [n, T, H, *E, M] complex at once:
    with g_s = dA ⊙ g_{s-1} + dx_s, Δy_s = 2 Re(C · (dA ⊙ g_{s-1})), Δy_0 = 0 -> [n, T, H, *E] real."""
    e = dx.dim() - 4
    a, c = _modes(dA, e).to(dx.dtype), _modes(C, e).to(dx.dtype)
    moves = dx.unbind(1)  # one backward node, not T
    g, dys = moves[0], [dx.real.new_zeros(dx.shape[:1] + dx.shape[2:-1])]
    for dx_s in moves[1:]:
        moved = a * g
        dys.append(2 * (c * moved).sum(-1).real)
        g = moved + dx_s
    return torch.stack(dys, dim=1)


def diag_ssm_first_order(du, gs, dA, dB, C) -> list[torch.Tensor]:
    """For every t, the first-order change of m from setting the state after t to another input's,
    (x'_t − x_t) · ∂m/∂x_t, from du = u' − u and each g = ∂m/∂y in `gs` (all [n, T, H, *E] real) -> [n, T] each.

    The SSM is time-invariant, so x'_t − x_t = Σ_{r<=t} dA^{t-r} dB du_r, and moving x_t changes y_s (s > t)
    by 2 Re(C dA^{s-t} ·): the product is Σ_{r<=t<s} Σ_{h,e} du_r K_{s-r} g_s with the SSM's own kernel K
    (`diag_ssm_kernel`); the modes never appear. M[r, s] = Σ du_r K_{s-r} g_s over (h, e) for r < s, summed
    over the pairs straddling t (`straddle_sum`): O(T² H E) per row, no state materialised."""
    n, T, H = du.shape[:3]
    K = diag_ssm_kernel(dA, dB, C, T).to(du.dtype)  # [T, H]
    lag = torch.arange(T, device=du.device)
    lags = lag[None, :] - lag[:, None]  # [r, s] -> s - r
    toeplitz = K[lags.clamp(min=0)].permute(2, 0, 1)  # [H, r, s]: K_{s-r} (r >= s never summed)
    pairs = lambda g: torch.einsum("nrhe,nshe->nhrs", du.reshape(n, T, H, -1), g.reshape(n, T, H, -1))
    return [straddle_sum((pairs(g) * toeplitz).sum(1)) for g in gs]  # M [n, r, s] -> Σ_{r<=t<s} M[r, s]
