"""Mamba-3's two-token ablation table: each row zeroes the `two_token` sites of exactly its layers."""

from __future__ import annotations

import torch

from mecheval.interventions import two_token
from mecheval.interventions.accuracy import accuracy
from mecheval.models import ModelConfig, build_model, record

from .conftest import small_ar


def lm_of(preset: str):
    task = small_ar()
    torch.manual_seed(0)
    lm = build_model(ModelConfig(preset=preset, vocab_size=task.vocab_size, d_model=16, max_len=64))
    return lm, task.sample(32, seed=1, split="test")


def test_each_row_zeroes_the_term_in_its_layers_only(monkeypatch):
    lm, batch = lm_of("mamba3")
    lm.train()
    zeroed = {}

    def seen_and_accuracy(model, b):  # records the sites after the ablation's hooks have run
        with record(model.sites(), ["layers.0.two_token", "layers.1.two_token"]) as acts:
            out = accuracy(model, b)
        zeroed[len(zeroed)] = [(a == 0).all(-1) for a in acts.values()]  # per layer: [B, T], zero at a position
        return out

    monkeypatch.setattr(two_token, "accuracy", seen_and_accuracy)
    table = two_token.two_token_ablation(lm, batch)
    assert list(table["layers"]) == ["none", "0+1", "0", "1", "0+1@value", "0+1@not value"]
    whole = [tuple(bool(z.all()) for z in layers) for layers in zeroed.values()]
    assert whole[:4] == [(False, False), (True, True), (True, False), (False, True)]
    at_value = torch.zeros_like(zeroed[0][0])
    at_value[torch.arange(len(batch)), batch.roles["value"]] = True
    for layer in (0, 1):  # the control: zeroed exactly at each example's value position, then exactly elsewhere
        assert torch.equal(zeroed[4][layer], at_value | zeroed[0][layer])  # (a position the model left 0 anyway)
        assert torch.equal(zeroed[5][layer], ~at_value | zeroed[0][layer])
    assert (table["n"] == 32).all() and table["acc"].between(0, 1).all() and (table["acc_lo"] <= table["acc"]).all()
    assert lm.training  # the mode it came in


def test_a_model_without_the_term_has_only_the_unablated_row():
    lm, batch = lm_of("mamba")
    table = two_token.two_token_ablation(lm, batch)
    assert list(table["layers"]) == ["none"] and table["acc"].iloc[0] == accuracy(lm, batch)[0] / 32
