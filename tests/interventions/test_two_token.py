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
        zeroed[len(zeroed)] = tuple(bool((a == 0).all()) for a in acts.values())
        return out

    monkeypatch.setattr(two_token, "accuracy", seen_and_accuracy)
    table = two_token.two_token_ablation(lm, batch)
    assert list(table["layers"]) == ["none", "0+1", "0", "1"]
    assert list(zeroed.values()) == [(False, False), (True, True), (True, False), (False, True)]
    assert (table["n"] == 32).all() and table["acc"].between(0, 1).all() and (table["acc_lo"] <= table["acc"]).all()
    assert lm.training  # the mode it came in


def test_a_model_without_the_term_has_only_the_unablated_row():
    lm, batch = lm_of("mamba")
    table = two_token.two_token_ablation(lm, batch)
    assert list(table["layers"]) == ["none"] and table["acc"].iloc[0] == accuracy(lm, batch)[0] / 32
