"""`mecheval intervene --hf DIR` end to end on tiny models saved to a temporary directory (nothing downloaded),
the token rules, and misuse."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from tests.hf.conftest import tiny

from mecheval.cli import app
from mecheval.hf.ar import WORD, ar_for, candidates, vocab_map

tr = pytest.importorskip("transformers")  # the optional extra `hf`: these tests skip without it


def test_intervene_hf_end_to_end(saved, tmp_path):
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["intervene", "--hf", str(saved), "--out", str(out), "--hf-pairs", "4", "--n", "32",
                                 "--sites", "resid_pre", "--sites", "state", "--analysis", "conv-window"])
    assert r.exit_code == 0, r.output
    info = json.loads((out / "hf.json").read_text())
    assert info["class"] == "MambaForCausalLM" and info["rule"] == "random" and info["params"]["n_pairs"] == 4
    vocab = info["vocab"]
    assert len(vocab) == len(set(vocab)) == 3 + 2 * info["params"]["n_keys"]  # distinct model ids, one per task token
    assert all(0 <= i < 64 for i in vocab)
    df = pd.read_parquet(out / "interventions.parquet")
    assert {"layers.0.state", "layers.1.state"} <= {f"layers.{layer}.{s}" for layer, s in zip(df["layer"], df["site"])}
    verdict = json.loads((out / "verdict.json").read_text())
    acc = pd.read_parquet(out / "accuracy.parquet").set_index("subset").loc["all"]
    assert verdict["acc_all"] == pytest.approx(acc["acc"]) and verdict["n_all"] == 32
    assert (out / "conv_window.parquet").exists()  # the owned path's short conv is found
    report = (out / "report.md").read_text()
    assert f"accuracy: {verdict['acc_all']:.3f}" in report and verdict["verdict"] in report
    assert (out / "interventions" / "key_resid_pre.png").exists()


def test_intervene_hf_scores_are_the_models_at_the_mapped_ids(saved):
    from mecheval.hf import wrap

    model = tr.AutoModelForCausalLM.from_pretrained(saved, local_files_only=True).eval()
    task = ar_for(model, 4)
    vocab = vocab_map(model, task, "random", seed=0)
    lm = wrap(model, vocab)
    batch = task.sample(4, seed=0)
    with torch.no_grad():
        torch.testing.assert_close(lm(batch.tokens), model(vocab[batch.tokens]).logits[..., vocab])
    assert vocab[1] == model.config.bos_token_id  # BOS is the model's
    assert not set(vocab[3:].tolist()) & {model.config.eos_token_id, model.config.pad_token_id}


class _Tok:
    all_special_ids = [0]
    words = {0: "<s>", 1: " cat", 2: "cat", 3: " dog", 4: " a", 5: " Dog", 6: " tree", 7: "!"}

    def __len__(self):
        return len(self.words)

    def decode(self, ids):
        return self.words[ids[0]]


def test_the_words_rule_keeps_single_token_lower_case_words_only():
    model = tiny("mamba", vocab=8)
    assert candidates(model, "words", _Tok()).tolist() == [1, 3, 6]
    assert all(WORD.match(w) for w in (" cat", " tree")) and not WORD.match(" Dog")
    with pytest.raises(ValueError, match="'words' rule needs the model's tokenizer"):
        candidates(model, "words", None)


@pytest.mark.parametrize("args, message", [
    (["--hf-tokens", "letters"], "--hf-tokens"),
    (["--over-training"], "--over-training"),
])
def test_intervene_hf_misuse_exits_2_naming_the_option(saved, args, message):
    r = CliRunner().invoke(app, ["intervene", "--hf", str(saved), *args])
    assert r.exit_code == 2 and message in r.output


def test_intervene_hf_on_a_missing_model_exits_2(tmp_path):
    r = CliRunner().invoke(app, ["intervene", "--hf", str(tmp_path / "nothing")])
    assert r.exit_code == 2 and "--hf" in r.output and "cannot load a causal LM" in r.output


def test_intervene_needs_a_path_or_hf_not_both(saved, tmp_path):
    assert CliRunner().invoke(app, ["intervene"]).exit_code == 2
    assert CliRunner().invoke(app, ["intervene", str(tmp_path), "--hf", str(saved)]).exit_code == 2


def test_intervene_hf_words_rule_with_the_saved_tokenizer(tmp_path):
    """A word-level tokenizer saved beside the model: keys and values are its single-token words."""
    from tokenizers import Tokenizer, models

    words = ["<unk>", "<s>"] + [f" w{a}{b}" for a in "abcdefgh" for b in "abcdefgh"]  # 64 words
    model_dir = tmp_path / "tiny-words"
    model = tiny("mamba", vocab=len(words))
    model.config.bos_token_id, model.config.eos_token_id, model.config.pad_token_id = 1, None, None
    model.save_pretrained(model_dir)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tr.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>").save_pretrained(model_dir)
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["intervene", "--hf", str(model_dir), "--hf-tokens", "words", "--hf-pairs", "4",
                                 "--n", "16", "--sites", "resid_pre", "--out", str(out)])
    assert r.exit_code == 0, r.output
    info = json.loads((out / "hf.json").read_text())
    assert info["rule"] == "words" and info["vocab"][1] == 1  # BOS is the model's
    assert sorted(info["vocab"][:1] + info["vocab"][2:]) == list(range(2, 2 + 64))  # every other id is a word


def test_intervene_hf_by_attribution_patching_with_verified_cells(saved, tmp_path):
    """--method gradient --verify K on a wrapped transformers model: K cells patched exactly, the check printed."""
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["intervene", "--hf", str(saved), "--out", str(out), "--hf-pairs", "4", "--n", "32",
                                 "--sites", "resid_pre", "--method", "gradient", "--verify", "2"])
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(out / "interventions.parquet")
    assert set(df["method"]) == {"gradient"} and df.loc[df["subset"] == "all", "verified"].sum() == 2
    assert "2 of" in r.output and "cells patched exactly" in r.output
