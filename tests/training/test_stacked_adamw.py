"""StackedAdamW: each row takes the update torch's AdamW gives its model alone."""

import pytest
import torch

from mecheval.training.stacked_adamw import StackedAdamW

SHAPES = [(6, 5), (7,), (2, 3, 4)]
LRS, DECAYS = [1e-3, 3e-3, 1e-2], [0.0, 0.1, 0.01]


def solo_and_stacked(seed: int = 0):
    """Three models' parameters (lists of tensors) each with torch's single-tensor AdamW, and the same stacked."""
    g = torch.Generator().manual_seed(seed)
    solo = [[torch.randn(s, generator=g).requires_grad_() for s in SHAPES] for _ in LRS]
    opts = [torch.optim.AdamW(p, lr=lr, weight_decay=wd, foreach=False) for p, lr, wd in zip(solo, LRS, DECAYS)]
    stacked = [torch.stack([p[i].detach() for p in solo]).requires_grad_() for i in range(len(SHAPES))]
    return solo, opts, stacked, StackedAdamW(stacked, (0.9, 0.999), 1e-8)


def set_grads(solo, stacked, g: torch.Generator) -> None:
    for i, s in enumerate(SHAPES):
        grads = torch.randn((len(solo), *s), generator=g)
        stacked[i].grad = grads
        for k, params in enumerate(solo):
            params[i].grad = grads[k].clone()


def test_every_row_is_torchs_adamw_bit_for_bit():
    solo, opts, stacked, opt = solo_and_stacked()
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        set_grads(solo, stacked, g)
        for o in opts:
            o.step()
        opt.step(torch.tensor(LRS, dtype=torch.float64), torch.tensor(DECAYS, dtype=torch.float64))
    for k, params in enumerate(solo):
        assert all(torch.equal(stacked[i][k], p) for i, p in enumerate(params))
        assert all(torch.equal(opt.state_of(k)[i]["exp_avg"], opts[k].state[p]["exp_avg"]) for i, p in enumerate(params))


def test_a_step_of_some_rows_leaves_the_others_as_they_were():
    solo, opts, stacked, opt = solo_and_stacked()
    g = torch.Generator().manual_seed(1)
    set_grads(solo, stacked, g)
    opt.step(torch.tensor(LRS, dtype=torch.float64), torch.tensor(DECAYS, dtype=torch.float64))
    before = [p.detach().clone() for p in stacked]
    set_grads(solo, stacked, g)
    rows = torch.tensor([2, 0])
    opt.step(torch.tensor([LRS[2], LRS[0]], dtype=torch.float64), torch.tensor([DECAYS[2], DECAYS[0]], dtype=torch.float64), rows)
    assert opt.steps.tolist() == [2, 1, 2]
    assert all(torch.equal(p[1], b[1]) for p, b in zip(stacked, before))
    assert all(not torch.equal(p[k], b[k]) for p, b in zip(stacked, before) for k in (0, 2))


@pytest.mark.parametrize("steps", [0, 3])
def test_a_rows_state_is_torchs_layout(steps):
    """state_of(k) loads into torch's AdamW of model k and continues it as the stacked one does; load_row reads
    it back."""
    solo, opts, stacked, opt = solo_and_stacked()
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        set_grads(solo, stacked, g)
        opt.step(torch.tensor(LRS, dtype=torch.float64), torch.tensor(DECAYS, dtype=torch.float64))
    state = {i: {k: v.clone() for k, v in s.items()} for i, s in opt.state_of(1).items()}  # a checkpoint's copy
    assert (state == {}) == (steps == 0)
    fresh = [p[1].detach().clone().requires_grad_() for p in stacked]
    torch_opt = torch.optim.AdamW(fresh, lr=LRS[1], weight_decay=DECAYS[1], foreach=False)
    torch_opt.load_state_dict({"state": state, "param_groups": torch_opt.state_dict()["param_groups"]})
    other = StackedAdamW([torch.zeros_like(p) for p in stacked], (0.9, 0.999), 1e-8)
    other.load_row(0, state)
    assert all(torch.equal(other.exp_avg_sq[i][0], s["exp_avg_sq"]) for i, s in state.items())
    set_grads(solo, stacked, g)
    for p, s in zip(fresh, stacked):
        p.grad = s.grad[1].clone()
    torch_opt.step()
    opt.step(torch.tensor(LRS, dtype=torch.float64), torch.tensor(DECAYS, dtype=torch.float64))
    assert all(torch.equal(p, s[1]) for p, s in zip(fresh, stacked))
