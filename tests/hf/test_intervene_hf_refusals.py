"""`mecheval intervene --hf DIR` refuses what it cannot read faithfully, in one line naming it, and leaves no
trace: weights that do not fit the model, special ids outside the vocabulary, `words` without a tokenizer,
an `--out` another call is writing."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from mecheval.cli import app

tr = pytest.importorskip("transformers")  # the optional extra `hf`: these tests skip without it


def _intervene(model_dir, out, *args):
    r = CliRunner().invoke(app, ["intervene", "--hf", str(model_dir), "--out", str(out), "--hf-pairs", "4",
                                 "--n", "16", "--sites", "resid_pre", *args])
    return r, " ".join(r.output.replace("│", " ").split())  # the message as one line (the error box unwrapped)


def test_weights_missing_or_unexpected_are_refused_by_name(saved, tmp_path):
    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text((saved / "config.json").read_text())
    weights = {k: v for k, v in load_file(saved / "model.safetensors").items() if ".layers.1." not in k}
    save_file(weights | {"extra.weight": torch.zeros(2)}, broken / "model.safetensors", metadata={"format": "pt"})
    r, line = _intervene(broken, tmp_path / "out")
    assert r.exit_code == 2, r.output
    assert "weight tensors missing 10 (backbone.layers.1.mixer.A_log," in line
    assert "unexpected 1 (extra.weight)" in line
    assert not (tmp_path / "out").exists()


def test_special_ids_outside_the_vocabulary_are_refused_by_name(tmp_path):
    model_dir = tmp_path / "gpt2"
    tr.GPT2LMHeadModel(tr.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=2, n_positions=64)).save_pretrained(model_dir)
    r, line = _intervene(model_dir, tmp_path / "out")
    assert r.exit_code == 2, r.output
    assert "bos_token_id 50256, eos_token_id 50256" in line and "vocabulary of 64 tokens" in line
    assert "IndexError" not in r.output and not (tmp_path / "out").exists()


def test_words_without_a_saved_tokenizer_names_the_fix(saved, tmp_path):
    r, line = _intervene(saved, tmp_path / "out", "--hf-tokens", "words")
    assert r.exit_code == 2, r.output
    assert "none is saved beside the model" in line and "--hf-tokens random" in line and "save_pretrained" in line
    assert "--hf-pairs" not in line and not (tmp_path / "out").exists()


def test_an_out_another_call_writes_is_refused(saved, tmp_path):
    from mecheval.training.lock import DirLock

    out = tmp_path / "out"
    with DirLock(out, "readout directory"):
        r, line = _intervene(saved, out)
    assert r.exit_code == 2, r.output
    assert "--out" in line and "in use by" in line and not (out / "verdict.json").exists()


def test_a_failed_readout_leaves_no_folder(saved, tmp_path, monkeypatch):
    import mecheval.interventions.runs as runs

    def fail(*_a, **_k):
        raise RuntimeError("interrupted")

    monkeypatch.setattr(runs, "intervene_model", fail)
    r, _ = _intervene(saved, tmp_path / "out")
    assert r.exit_code == 1 and not (tmp_path / "out").exists()


def test_a_readout_of_other_examples_is_kept(saved, tmp_path):
    out = tmp_path / "out"
    assert _intervene(saved, out)[0].exit_code == 0
    before = (out / "verdict.json").read_bytes()
    r, line = _intervene(saved, out, "--n", "24")
    assert r.exit_code == 2 and "--n 16, not 24" in line and "--replace" in line, r.output
    assert (out / "verdict.json").read_bytes() == before


def test_too_many_pairs_for_the_rules_tokens_names_the_most_that_fit(saved, tmp_path):
    r, line = _intervene(saved, tmp_path / "out", "--hf-pairs", "40")
    assert r.exit_code == 2 and "too few keys and values for 40 pairs: lower --hf-pairs to 30 or fewer" in line, r.output
