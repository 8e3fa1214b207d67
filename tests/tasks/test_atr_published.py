"""ATR on the published easy grammar and the published sets (`tasks/atr/published.py`, `ATRParams.grammar_draw`).

The frozen digests were computed from the npz that tools/atr/atr_published.py wrote before the generator moved into
the package (whose first 2,000 training documents were checked token-identical to the original generator's).
"""

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch

from mecheval.study import STUDIES
from mecheval.tasks import make_task
from mecheval.tasks.atr.published import N_TEST, N_TRAIN, published_documents, published_grammar, published_heldout
from mecheval.training import ConfigError, train, validate_config
from mecheval.training.data import TrainStream
from mecheval.training.run_dir import RunDir

GRAMMAR_FIELDS = ("depth_cap", "n_rules", "rule_cdf", "rhs_len", "rhs_sym", "rhs_is_t", "head_cdf", "head_flat")
ROOT = Path(__file__).resolve().parents[2]
# the generalisation language as the original generator wrote it (tinylang's PCFG, seed 42, pcfg_train_test_split):
# its first held-out (target, query) cells, flat, and each set's digest (`_digest`), named by our splits
FIRST_HELDOUT = [4, 5, 6, 10, 14]
SPLIT_DIGESTS = {"train": "5f9ad760c5975d87", "test": "9a506ad7501a53bb", "heldout": "433c3710c45868b2"}
TINY = {"model": {"preset": "attention", "d_model": 8, "n_layers": 1}, "steps": 3, "batch_size": 4,
        "eval": {"size": 8, "every": 3}, "device": "cpu"}


def _digest(forest, key) -> str:
    """sha256 of each document's tokens (`<bos> t… <eos> q target <eos>`), as the tool's npz rows without padding."""
    h = hashlib.sha256()
    for s, m, k in zip(forest.starts, forest.length, key):
        ctx = forest.label[s: s + m] + 3
        tokens = [1, *ctx, 2, ctx[k], ctx[forest.parent[s + k]], 2]
        h.update(np.array(tokens, dtype=np.int64).tobytes() + b"|")
    return h.hexdigest()[:16]


def test_the_published_grammar_is_the_one_the_tool_wrote():
    g = published_grammar()
    h = hashlib.sha256()
    for k in GRAMMAR_FIELDS:
        h.update(np.ascontiguousarray(getattr(g, k)).tobytes())
    assert h.hexdigest()[:16] == "6a2a0d8465cc168c"
    assert g.depth_cap.tolist()[:10] == [7, 4, 8, 5, 7, 10, 3, 7, 8, 5]
    assert (g.n_rules.sum(), g.rhs_len.sum()) == (110, 287)
    assert g.spec == make_task("atr").grammar.spec  # the easy spec


def test_the_first_published_documents_match_their_frozen_digest():
    forest, key = published_documents(2000, 0)["train"]
    assert len(forest.length) == 2000 and _digest(forest, key) == "b3db5655cd871fce"
    first = make_task("atr", grammar_draw="published-sets").training_set(2)
    assert first.tokens[0, :10].tolist() == [1, 9, 17, 9, 9, 16, 2, 9, 16, 2]
    assert first.tokens[1, :16].tolist() == [1, 9, 5, 14, 21, 17, 18, 9, 5, 14, 21, 13, 19, 18, 4, 2]


def test_the_whole_published_sets_match_their_frozen_digests():
    sets = published_documents()
    assert [len(sets[s][0].length) for s in ("train", "test")] == [N_TRAIN, N_TEST]
    assert _digest(*sets["train"]) == "c192cc31864ad1aa" and _digest(*sets["test"]) == "ccedc192f2691135"
    test, key = sets["test"]
    assert (test.length + 5).mean() == pytest.approx(20.96, abs=0.01)  # docs/findings/atr.md: mean 20.96, max 105
    assert (test.length + 5).max() == 105 and (test.parent[test.starts + key] - key).mean() == pytest.approx(2.56, abs=0.01)


def test_the_generalisation_language_s_held_out_pairs_and_sets_match_the_original_generator_s():
    """The published generalisation language (`pcfg_train_test_split/pcfg.yaml`): its held-out pairs are drawn before
    its grammar, so that grammar is not easy's; its sets are the training set, a dev set and a held-out test set. The
    digests were computed from the original generator's output (tinylang's `PCFG`, run unmodified with seed 42)."""
    heldout = published_heldout(0.2)
    assert heldout.shape == (20, 20) and heldout.sum() == 90 and np.flatnonzero(heldout)[:5].tolist() == FIRST_HELDOUT
    assert published_grammar(0.2).depth_cap.tolist()[:5] != published_grammar().depth_cap.tolist()[:5]
    sets = published_documents(N_TRAIN, N_TEST, 0.2)
    assert {s: _digest(*sets[s]) for s in sets} == SPLIT_DIGESTS
    forest, key = sets["heldout"]  # queries only held-out pairs, the training and dev sets none
    assert heldout[forest.label[forest.starts + forest.parent[forest.starts + key]], forest.label[forest.starts + key]].all()
    for s in ("train", "test"):
        forest, key = sets[s]
        assert not heldout[forest.label[forest.starts + forest.parent[forest.starts + key]], forest.label[forest.starts + key]].any()


def test_grammar_draw_published_split_holds_out_the_published_pairs_and_reads_the_published_held_out_set():
    task = make_task("atr", grammar_draw="published-split", holdout_frac=0.2)
    assert task.grammar is published_grammar(0.2) and task.training_set_size is None
    assert task.published_stats == {}  # easy's figures are not this grammar's
    heldout = published_heldout(0.2)
    for split, share in (("train", 0.0), ("test", 0.0), ("heldout", 1.0)):
        batch = task.sample(128, seed=0, split=split)
        query = batch.tokens[torch.arange(128), batch.roles["query"]].numpy()
        assert heldout[batch.answer.numpy() - 3, query - 3].mean() == share
        assert task.is_heldout(query, batch.answer.numpy()).mean() == share
    sets = make_task("atr", grammar_draw="published-split-sets", holdout_frac=0.2)
    assert sets.training_set_size == N_TRAIN
    assert sets.training_set(3).tokens.equal(task._batch(*published_documents(3, 0, 0.2)["train"]).tokens)
    assert task.published_test_set(4, "heldout").tokens.equal(task._batch(*published_documents(N_TRAIN, 4, 0.2)["heldout"]).tokens)
    with pytest.raises(ValueError, match="the published held-out set is the generalisation language's"):
        make_task("atr", grammar_draw="published", holdout_frac=0.2).published_test_set(4, "heldout")


def test_grammar_draw_published_samples_the_published_grammar_with_our_sampler():
    task = make_task("atr", grammar_draw="published")
    assert task.grammar is published_grammar() and task.training_set_size is None
    assert task.chance_accuracy == pytest.approx(0.157, abs=0.001)  # docs/findings/atr.md's table
    ours = make_task("atr").sample(16, seed=0, split="test")
    batch = task.sample(16, seed=0, split="test")
    assert not np.array_equal(batch.tokens[:, :8].numpy(), ours.tokens[:, :8].numpy())  # another grammar
    assert task.published_stats == make_task("atr").published_stats


@pytest.mark.parametrize("params, match", [
    ({"grammar": "medium", "grammar_draw": "published"}, "needs grammar 'easy', not 'medium'"),
    ({"grammar_draw": "published", "grammar_seed": 3}, "grammar_seed applies to grammar_draw 'mecheval'"),
    ({"grammar_draw": "published-sets", "holdout_frac": 0.2}, "holds no pairs out"),
    ({"grammar_draw": "published-split"}, "needs holdout_frac"),
    ({"grammar_draw": "published-split-sets", "grammar": "large_vocab", "holdout_frac": 0.2}, "needs grammar 'easy'"),
    ({"grammar_draw": "ours"}, "'mecheval', 'published', 'published-sets', 'published-split' or 'published-split-sets'"),
])
def test_grammar_draw_is_validated(params, match):
    with pytest.raises(ValueError, match=match):
        make_task("atr", **params)


def test_the_published_sets_need_a_pool_within_them():
    task = {"name": "atr", "params": {"grammar_draw": "published-sets"}}
    with pytest.raises(ConfigError, match="train_size: the task trains on its fixed set of 100032 examples"):
        validate_config({**TINY, "task": task})
    with pytest.raises(ConfigError, match="give train_size 1..100032"):
        validate_config({**TINY, "task": task, "train_size": N_TRAIN + 1})
    with pytest.raises(ValueError, match="fixed set of 100032"):
        TrainStream(make_task("atr", grammar_draw="published-sets"), 4, 0, None)
    stream = TrainStream(make_task("atr", grammar_draw="published-sets"), 4, seed=5, pool_size=8, order="replay")
    other = TrainStream(make_task("atr", grammar_draw="published-sets"), 4, seed=0, pool_size=8, order="replay")
    assert stream.batch(0).tokens.equal(other.batch(2).tokens)  # the set in its order, every seed and epoch


def test_the_default_draw_keeps_every_fingerprint():
    base = {**TINY, "task": {"name": "atr", "params": {"grammar": "easy"}}}
    cfg = validate_config(base)
    same = validate_config(base, {"task.params.grammar_draw": "mecheval"})
    assert same.fingerprint() == cfg.fingerprint() and "grammar_draw" not in same.identity()["task"]["params"]
    assert validate_config(base, {"task.params.grammar_draw": "published"}).fingerprint() != cfg.fingerprint()


def test_committed_atr_runs_keep_their_fingerprints():
    """Every committed ATR run reads back with the fingerprint its summary (or a diverged run's diverged.json, since it
    records one) records, and one of our draw (most were made before grammar_draw existed) would with grammar_draw
    written at its default."""
    runs = [RunDir(p.parent) for p in sorted((ROOT / "results").rglob("runs/*/config.yaml")) if "name: atr" in p.read_text()]
    assert runs
    for run in runs:
        cfg = run.read_config()
        recorded = run.read_summary() if run.finished else run.read_divergence()
        assert cfg.fingerprint() == recorded.get("fingerprint", cfg.fingerprint()), run.path
        if cfg.task.params.get("grammar_draw", "mecheval") != "mecheval":  # trained on the published grammar
            continue
        written = cfg.model_dump(mode="json")
        written["task"]["params"]["grammar_draw"] = "mecheval"
        assert validate_config(written).fingerprint() == cfg.fingerprint(), run.path


@pytest.mark.parametrize("draw, extra", [("published", {}), ("published-sets", {"train_size": 64, "train_order": "replay"})])
def test_a_tiny_run_trains_on_the_published_grammar(tmp_path, draw, extra):
    cfg = validate_config({**TINY, **extra, "task": {"name": "atr", "params": {"grammar_draw": draw}}})
    summary = train(cfg, tmp_path / "run", quiet=True)
    assert summary["steps"] == 3 and set(summary["final"]) == {"train", "test"}
    assert RunDir(tmp_path / "run").read_config().task.params["grammar_draw"] == draw


def test_a_study_trains_on_the_published_grammar():
    sweep = STUDIES["atr-mamba-noconv"].sweep("paper", widths=[64], archs=["attention", "mamba"], grammar_draw="published")
    assert sweep["base"]["task"] == {"name": "atr", "params": {"grammar": "easy", "grammar_draw": "published"}}
    assert STUDIES["atr-mamba-noconv"].task == {"name": "atr", "params": {"grammar": "easy"}}  # the preset unchanged
    assert STUDIES["atr-mamba-noconv"].sweep("cpu", grammar_draw="mecheval") == STUDIES["atr-mamba-noconv"].sweep("cpu")
    sets = STUDIES["atr-mamba-noconv"].sweep("paper", grammar_draw="published-sets")["base"]
    assert sets["train_size"] == N_TRAIN and sets["train_order"] == "replay"
    with pytest.raises(ValueError, match="give --grammars easy"):
        STUDIES["atr"].sweep("paper", grammar_draw="published")
    assert STUDIES["atr"].sweep("paper", grammars=["easy"], grammar_draw="published")["base"]["task"]["params"] == {
        "grammar_draw": "published"}
    with pytest.raises(ValueError, match="the paper scale's fixed training set"):
        STUDIES["atr-mamba-noconv"].sweep("cpu", grammar_draw="published-sets")
    with pytest.raises(ValueError, match="grammar_draw applies to ATR studies"):
        STUDIES["quick"].sweep("cpu", grammar_draw="published")


def test_the_published_test_set_is_the_published_test_documents_and_only_for_their_grammar():
    """`ATRTask.published_test_set(n)`: the first n published test documents as a batch (what the published accuracy
    read: the first 320), refused for our own grammar draw."""
    batch = make_task("atr", grammar_draw="published").published_test_set(320)
    forest, key = published_documents(N_TRAIN, 320)["test"]
    assert len(batch) == 320 and batch.lengths.tolist() == (forest.length + 5).tolist()
    assert batch.roles["key"].tolist() == (key + 1).tolist()
    with pytest.raises(ValueError, match="published grammar: grammar_draw 'published' or .*'published-split-sets'"):
        make_task("atr").published_test_set(320)
