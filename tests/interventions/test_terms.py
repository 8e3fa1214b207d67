"""A term's ablation table (Mamba-3's two-token term and rotation, RWKV-7's token shift, DeltaProduct's negative
eigenvalues): each row zeroes the term's sites of exactly its layers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from mecheval.interventions import terms
from mecheval.interventions.accuracy import accuracy
from mecheval.interventions.patching import LENGTH_GROUPS
from mecheval.models import ModelConfig, attach, build_model, record
from mecheval.tasks import make_task

from .conftest import small_ar


def lm_of(preset: str):
    task = small_ar()
    torch.manual_seed(0)
    lm = build_model(ModelConfig(preset=preset, vocab_size=task.vocab_size, d_model=16, max_len=64))
    return lm, task.sample(32, seed=1, split="test")


@pytest.mark.parametrize(("preset", "analysis"), [("mamba3", "two-token"), ("mamba3", "rotary"), ("rwkv7", "two-token"),
                                                 ("deltaproduct", "reflection")])
def test_each_row_zeroes_the_term_in_its_layers_only(monkeypatch, preset, analysis):
    lm, batch = lm_of(preset)
    term = terms.TERMS[analysis]
    lm.train()
    zeroed = {}

    def seen_and_accuracy(model, b, within):  # records the sites after the ablation's hooks have run (AR: the
        with within(b), record(model.sites(), [f"layers.{i}.{term.sites[0]}" for i in (0, 1)]) as acts:  # one group)
            out = accuracy(model, b)
        zeroed[len(zeroed)] = [(a == 0).all(-1) for a in acts.values()]  # per layer: [B, T], zero at a position
        return out

    monkeypatch.setattr(terms, "accuracy", seen_and_accuracy)
    table = terms.term_ablation(lm, batch, term)
    roles = [role for role, pos in batch.roles.items() if pos.dim() == 1]
    assert roles[:2] == ["key", "value"] and "query" in roles
    assert list(table["layers"]) == ["none", "0+1", "0", "1", *(f"0+1@{w}{r}" for r in roles for w in ("", "not "))]
    whole = [tuple(bool(z.all()) for z in layers) for layers in zeroed.values()]
    assert whole[:4] == [(False, False), (True, True), (True, False), (False, True)]
    for i, role in enumerate(roles):  # the controls: zeroed exactly at each example's position of the role, then
        at = torch.zeros_like(zeroed[0][0])  # exactly elsewhere (or where the model left the term 0 anyway)
        at[torch.arange(len(batch)), batch.roles[role]] = True
        for layer in (0, 1):
            assert torch.equal(zeroed[4 + 2 * i][layer], at | zeroed[0][layer])
            assert torch.equal(zeroed[5 + 2 * i][layer], ~at | zeroed[0][layer])
    assert (table["n"] == 32).all() and table["acc"].between(0, 1).all() and (table["acc_lo"] <= table["acc"]).all()
    assert lm.training  # the mode it came in


def test_all_terms_zeroes_mamba3_s_two_terms_together_in_each_row_and_needs_two_kinds(monkeypatch):
    lm, batch = lm_of("mamba3")
    names = [f"layers.{i}.{kind}" for i in (0, 1) for kind in ("two_token", "rotary")]
    zeroed = []

    def seen_and_accuracy(model, b, within):
        with within(b), record(model.sites(), names) as acts:
            out = accuracy(model, b)
        zeroed.append({name: bool((a == 0).all()) for name, a in acts.items()})
        return out

    monkeypatch.setattr(terms, "accuracy", seen_and_accuracy)
    table = terms.term_ablation(lm, batch, terms.TERMS["all-terms"])
    assert list(table["layers"][:4]) == ["none", "0+1", "0", "1"]
    assert [sorted(n for n, z in row.items() if z) for row in zeroed[:4]] == [
        [], sorted(names), ["layers.0.rotary", "layers.0.two_token"], ["layers.1.rotary", "layers.1.two_token"]]
    for preset in ("rwkv7", "deltaproduct"):  # one term of their own: the analysis does not apply
        assert terms.term_sites(lm_of(preset)[0], terms.TERMS["all-terms"]) == {}


@pytest.mark.parametrize("analysis", list(terms.TERMS))
def test_a_model_without_the_term_has_only_the_unablated_row(analysis):
    lm, batch = lm_of("mamba")
    table = terms.term_ablation(lm, batch, terms.TERMS[analysis])
    assert list(table["layers"]) == ["none"] and table["acc"].iloc[0] == accuracy(lm, batch)[0] / 32


def test_every_term_is_an_analysis_the_cli_and_studies_accept():
    from mecheval.interventions.runs import KEPT
    from mecheval.interventions.spec import ANALYSES

    assert set(terms.TERMS) <= set(ANALYSES) and all(KEPT[name] == (t.file,) for name, t in terms.TERMS.items())


def test_the_position_rows_zero_each_example_s_own_position_in_a_batch_of_mixed_lengths():
    """ATR prompts differ in length: `accuracy` runs them in length groups, each cut to its longest, and the
    position controls zero each example's own position within its group (a mask of the whole batch raised on
    ATR): each row's accuracy is the one each example gets run alone with the term zeroed at its position."""
    task = make_task("atr", grammar="easy")
    batch = task.sample(24, seed=1, split="test")
    assert len(batch.by_length(LENGTH_GROUPS)) > 1
    torch.manual_seed(0)
    lm = build_model(ModelConfig(preset="mamba3", vocab_size=task.vocab_size, d_model=16, max_len=int(batch.lengths.max())))
    term = terms.TERMS["two-token"]
    table = terms.term_ablation(lm, batch, term).query("examples == 'all'").set_index("layers")["acc"]
    for role in ("key", "value", "query"):
        for at in (True, False):
            correct = 0
            for i in range(len(batch)):
                one = batch.select(torch.tensor([i])).trimmed()
                where = torch.zeros(one.tokens.shape, dtype=torch.bool)
                where[0, one.roles[role]] = True
                where = where if at else ~where
                with attach(lm.sites(), {name: lambda x, w=where: x.masked_fill(w[..., None], 0.0)
                                         for layer in terms.term_sites(lm, term).values() for name in layer}):
                    correct += accuracy(lm, one)[0]
            assert table[f"0+1@{'' if at else 'not '}{role}"] == pytest.approx(correct / len(batch), abs=1.5 / len(batch))


def test_atr_reads_the_controls_apart_by_key_value_distance(monkeypatch):
    """Where the value does not always follow its key (ATR), the controls are read again on the adjacent and the
    apart examples alone; on the apart ones also on the stretch key+1 … value: each row zeroes the term exactly
    there, or exactly elsewhere, in the examples of its part. AR has the `all` rows only."""
    task = make_task("atr", grammar="easy")
    batch = task.sample(32, seed=2, split="test")
    apart = batch.roles["value"] - batch.roles["key"] > 1
    assert apart.any() and not apart.all()
    torch.manual_seed(0)
    lm = build_model(ModelConfig(preset="mamba3", vocab_size=task.vocab_size, d_model=16, max_len=int(batch.lengths.max())))
    term = terms.TERMS["two-token"]
    seen = []

    def seen_and_accuracy(model, b, within):  # one forward of the whole padded part: the sites after the hooks
        with within(b), record(model.sites(), [f"layers.{i}.{term.sites[0]}" for i in (0, 1)]) as acts, torch.no_grad():
            model(b.tokens)
        seen.append((b, [(a == 0).all(-1) for a in acts.values()]))  # per layer: [B_part, T], zero at a position
        return 0, len(b)

    monkeypatch.setattr(terms, "accuracy", seen_and_accuracy)
    table = terms.term_ablation(lm, batch, term)
    rows = {name: part.reset_index(drop=True) for name, part in table.groupby("examples")}
    assert set(rows) == {"all", "adjacent", "apart"}
    span = [f"0+1@{terms.SPAN}", f"0+1@not {terms.SPAN}"]
    assert list(rows["apart"]["layers"]) == ["none", "0+1", "0+1@value", "0+1@not value", *span]
    assert list(rows["adjacent"]["layers"]) == ["none", "0+1", "0+1@value", "0+1@not value"]
    assert rows["adjacent"]["n"].eq(int((~apart).sum())).all() and rows["apart"]["n"].eq(int(apart.sum())).all()
    first_apart = len(rows["all"]) + len(rows["adjacent"])
    part, unablated = seen[first_apart]
    assert torch.equal(part.tokens, batch.select(apart.nonzero()[:, 0]).tokens)
    t = torch.arange(part.tokens.shape[1])[None]
    stretch = (t > part.roles["key"][:, None]) & (t <= part.roles["value"][:, None])
    for offset, where in ((4, stretch), (5, ~stretch)):
        for layer in (0, 1):
            assert torch.equal(seen[first_apart + offset][1][layer], where | unablated[layer])
    ar_lm, ar_batch = lm_of("mamba3")
    assert set(terms.term_ablation(ar_lm, ar_batch, term)["examples"]) == {"all"}


ATR_MAMBA3 = Path(__file__).parents[2] / "results/cpu/modern-atr-mamba3/runs/preset-mamba3_lr-0.01_seed-0"


@pytest.mark.skipif(not ATR_MAMBA3.exists(), reason="the committed modern-atr-mamba3 study is not in this checkout")
def test_reread_terms_writes_the_committed_term_table_again_and_nothing_else(tmp_path):
    """`runs.reread_terms` on a committed ATR run, read by its study's spec: its two-token table as committed (the
    distance rows included), every other file as it was; a spec drawing other examples is refused."""
    from mecheval.interventions.runs import reread_terms
    from mecheval.study.presets import STUDIES

    run = shutil.copytree(ATR_MAMBA3, tmp_path / "run", ignore=shutil.ignore_patterns(".lock", "*.png"))
    term = run / terms.TWO_TOKEN
    committed = pd.read_parquet(term)
    assert {"adjacent", "apart"} <= set(committed["examples"])
    committed.head(1).to_parquet(term)  # a stale table, as an earlier version wrote
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p != term}
    spec = STUDIES["modern-atr"].readout(512)
    assert reread_terms(run, spec.model_copy(update={"analyses": ["two-token"]})) == [terms.TWO_TOKEN]
    pd.testing.assert_frame_equal(pd.read_parquet(term), committed)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p not in (term, run / ".lock")} == before
    with pytest.raises(ValueError, match="other examples"):
        reread_terms(run, spec.model_copy(update={"n": 64}))
