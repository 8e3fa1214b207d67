"""Each mixer can learn: a 2-layer model overfits a fixed batch of 32 AR examples (slow)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mecheval.tasks import make_task

from .conftest import ARCHS, build, make_config

BATCH, D_MODEL, LR = 32, 32, 3e-3
MAX_STEPS, TARGET_LOSS = 600, 0.05


def steps_to_overfit(arch: str, seed: int = 0) -> tuple[int, float]:
    """AdamW on one fixed AR batch (loss on the answer only) until the loss is below TARGET_LOSS.

    -> (steps taken, final loss); steps == MAX_STEPS when the target was not reached.
    """
    task = make_task("ar", n_pairs=4, n_keys=16, n_values=16)
    batch = task.sample(BATCH, seed=seed)
    cfg = make_config(arch, d_model=D_MODEL, vocab_size=task.vocab_size, max_len=batch.tokens.shape[1])
    lm = build(cfg, seed).train()
    opt = torch.optim.AdamW(lm.parameters(), lr=LR, weight_decay=0.0)
    for step in range(1, MAX_STEPS + 1):
        loss = F.cross_entropy(lm(batch.tokens, positions=batch.answer_pos), batch.answer)
        if loss.item() < TARGET_LOSS:
            return step - 1, loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return MAX_STEPS, loss.item()


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_mixer_overfits_a_fixed_ar_batch(arch):
    steps, loss = steps_to_overfit(arch)
    assert loss < TARGET_LOSS, f"{arch}: loss {loss:.3f} after {steps} steps"
