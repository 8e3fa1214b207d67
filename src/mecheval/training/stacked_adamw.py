"""AdamW over K models at once: each parameter a tensor [K, ...] (one row per model, `torch.func.stack_module_state`),
with a learning rate, a weight decay and a step count per model.

Row k takes the update torch's AdamW gives model k alone (bitwise its single-tensor path; the fused kernel that
`optimizer.adamw` picks rounds a few values 1 ulp apart):
    p ← p · (1 − lr_k · wd_k);  m ← lerp(m, g, 1 − β1);  v ← β2 · v + (1 − β2) · g²
    p ← p − lr_k / (1 − β1^t_k) · m / (sqrt(v) / sqrt(1 − β2^t_k) + eps)
A step moves only the rows it is given (the others, and their moments and step counts, stay bitwise as they were).
The state of one row reads and writes in the layout of torch's AdamW `state_dict()["state"]`, so a model's
checkpoint is the one its solo run writes.
"""

from __future__ import annotations

import torch


class StackedAdamW:
    """AdamW for the stacked leaves `params` ([K, ...] each, gradients in `.grad`); betas and eps shared."""

    def __init__(self, params: list[torch.Tensor], betas: tuple[float, float], eps: float) -> None:
        self.params, self.betas, self.eps = params, betas, eps
        self.exp_avg = [torch.zeros_like(p) for p in params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in params]
        self.steps = torch.zeros(params[0].shape[0], dtype=torch.float64, device=params[0].device)  # [K]

    @torch.no_grad()
    def step(self, lr: torch.Tensor, weight_decay: torch.Tensor, rows: torch.Tensor | None = None) -> None:
        """One update of the `rows` (LongTensor [k] on the device; None: all K) with their lr and weight_decay
        ([k] float64: the per-row scalars in double precision, as torch's AdamW computes its Python floats)."""
        tensors = [self.params, [p.grad for p in self.params], self.exp_avg, self.exp_avg_sq]
        if rows is None:
            self.steps += 1
            _update(*tensors, self.steps, lr, weight_decay, self.betas, self.eps)
            return
        self.steps.index_add_(0, rows, torch.ones_like(rows, dtype=self.steps.dtype))
        params, grads, exp_avg, exp_avg_sq = ([t.index_select(0, rows) for t in group] for group in tensors)
        _update(params, grads, exp_avg, exp_avg_sq, self.steps[rows], lr, weight_decay, self.betas, self.eps)
        for whole, part in zip([*self.params, *self.exp_avg, *self.exp_avg_sq], [*params, *exp_avg, *exp_avg_sq]):
            whole.index_copy_(0, rows, part)

    def state_of(self, k: int) -> dict[int, dict[str, torch.Tensor]]:
        """Row k's state as torch's AdamW `state_dict()["state"]` (parameter index -> step, exp_avg, exp_avg_sq);
        empty before its first step, as torch's."""
        if not self.steps[k]:
            return {}
        step = self.steps[k].float()  # as torch's AdamW keeps it
        return {i: {"step": step.clone(), "exp_avg": m[k], "exp_avg_sq": v[k]}
                for i, (m, v) in enumerate(zip(self.exp_avg, self.exp_avg_sq))}

    @torch.no_grad()
    def load_row(self, k: int, state: dict[int, dict[str, torch.Tensor]]) -> None:
        """Row k from torch's AdamW state (`state_of`'s layout); an empty state leaves it fresh."""
        for i, s in state.items():
            self.exp_avg[i][k].copy_(s["exp_avg"])
            self.exp_avg_sq[i][k].copy_(s["exp_avg_sq"])
            self.steps[k] = s["step"]


def _update(params, grads, exp_avgs, exp_avg_sqs, steps, lr, weight_decay, betas, eps) -> None:
    """The AdamW update in place on [k, ...] tensors whose every row steps; steps (already counted), lr,
    weight_decay [k]."""
    beta1, beta2 = betas
    step_size = lr / (1 - beta1**steps)
    bias2_sqrt = (1 - beta2**steps).sqrt()
    decay = 1 - lr * weight_decay
    for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
        shape = (-1,) + (1,) * (p.dim() - 1)  # the per-row scalars against [k, ...], rounded to p's dtype
        p.mul_(decay.to(p.dtype).view(shape))
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        denom = (v.sqrt() / bias2_sqrt.to(p.dtype).view(shape)).add_(eps)
        p.sub_(step_size.to(p.dtype).view(shape) * m / denom)
