"""Agreement with the study's reference implementation (pyvene) on residual-stream sites."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("pyvene")

from mecheval.interventions import interchange  # noqa: E402
from mecheval.interventions.engine import run_scores  # noqa: E402
from mecheval.interventions.metrics import attribution  # noqa: E402
from mecheval.interventions.pyvene_ref import pyvene_patch  # noqa: E402
from tests.interventions.handbuilt import induction_lm  # noqa: E402
from tests.interventions.test_engine import random_lm  # noqa: E402


def _model(kind: str, vocab: int, seq_len: int):
    if kind == "random":  # arbitrary patched values, but a tiny clean-corrupt gap
        return random_lm(vocab, seed=3, n_layers=2)
    lm = induction_lm(vocab, seq_len)  # its attention weights perturbed: a large gap, attributions near 0 / 1
    torch.manual_seed(0)
    with torch.no_grad():
        for p in (q for block in lm.layers for q in block.mixer.parameters()):
            p.add_(0.03 * torch.randn_like(p))
    return lm


@pytest.mark.parametrize("kind, corrupt", [("random", "value"), ("handbuilt", "key")])
def test_residual_sites_match_pyvene(ar_task, kind, corrupt):
    batch = ar_task.sample(64, seed=7, split="test")
    lm = _model(kind, ar_task.vocab_size, batch.tokens.shape[1])
    df = interchange(lm, ar_task, batch, corrupt, ["resid_pre", "resid_mid", "resid_post"], list(batch.roles), seed=4,
                     subsets=None)
    corrupted = ar_task.corrupt(batch, corrupt, 4).tokens
    p_clean = run_scores(lm, batch.tokens, batch.answer, batch.answer_pos)[0].double().mean().item()
    p_corrupt = run_scores(lm, corrupted, batch.answer, batch.answer_pos)[0].double().mean().item()
    assert df["p_patched"].std() > 1e-5  # the cells differ: the comparison is not vacuous
    for row in df.itertuples():
        p, logit = pyvene_patch(
            lm, corrupted, batch.tokens, f"layers.{row.layer}.{row.site}", batch.roles[row.position],
            batch.answer, batch.answer_pos,
        )
        assert row.p_patched == pytest.approx(p.double().mean().item(), abs=1e-7)
        assert row.logit_patched == pytest.approx(logit.double().mean().item(), abs=1e-5)
        if p_clean - p_corrupt > 0.1:  # attributions well conditioned
            assert row.attrib == pytest.approx(attribution(p.double().mean().item(), p_clean, p_corrupt), abs=1e-5)
    if kind == "handbuilt":
        assert p_clean - p_corrupt > 0.5
