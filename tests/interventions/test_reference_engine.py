"""The batched engine (`engine.patch_cells`) equals the plain one-forward-per-cell definition
(`reference.reference_patch_cells`) on every site of a few mixers, state sites included, at one and at two
positions per example, with cells of every layer sharing passes.

Tolerance: atol 1e-5 on probabilities and logits, rtol 1e-5. Both compute in float32; the engine's runs start
at the patched layer from the recorded base residual and run the last block's position-wise part only at the
answer, so its sums are the reference's in other orders (seen here: at most 3e-8 on probabilities, 1.2e-6 on
logits, none on four of the six mixers)."""

from __future__ import annotations

import pytest
import torch

from mecheval.interventions import Cell, patch_cells
from mecheval.interventions.reference import reference_patch_cells
from mecheval.models.states import StateSite

from .test_engine import random_lm

MIXERS = ("attention", "mamba", "h3", "based", "deltanet", "mamba3")
KEYS = ("p_base", "logit_base", "p_source", "logit_source", "p_patched", "logit_patched")


@pytest.mark.parametrize("mixer", MIXERS)
def test_the_batched_engine_equals_the_reference(ar_task, mixer):
    lm = random_lm(ar_task.vocab_size, seed=1, mixer=mixer, n_layers=2)
    batch = ar_task.sample(6, seed=4)
    other = ar_task.sample(6, seed=5).tokens  # another prompt at every position: most patches act
    g = torch.Generator().manual_seed(4)
    where = {**batch.roles, "two": torch.randint(batch.tokens.shape[1], (6, 2), generator=g)}
    sites = lm.sites()
    cells = [Cell(s, p) for s in sites for p in where if not (isinstance(sites[s], StateSite) and p == "two")]
    args = (lm, other, batch.tokens, cells, where, batch.answer, batch.answer_pos)
    got, want = patch_cells(*args, chunk=3), reference_patch_cells(*args)
    for key in KEYS:
        torch.testing.assert_close(got[key], want[key], atol=1e-5, rtol=1e-5, msg=lambda m, key=key: f"{key}: {m}")
    moved = (want["p_patched"] - want["p_base"]).abs().amax(1) > 1e-3
    assert moved.sum() >= len(cells) // 5  # the patches act (not at positions the answer cannot see)
