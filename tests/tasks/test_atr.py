"""ATR: grammar termination, dependency trees, the unambiguous parent query, the generalisation
split, the batched generator against the per-example reference, and the published statistics."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mecheval.tasks import make_task
from mecheval.tasks.atr.pcfg import GrammarSpec, build_grammar, derive
from mecheval.tasks.atr.reference import derive_one, query_one
from mecheval.tasks.stats import example_stats

SEEDS = st.integers(0, 2**31 - 1)
EASY = make_task("atr")
MEDIUM = make_task("atr", grammar="medium")
LARGE = make_task("atr", grammar="large_vocab")
SPLIT = make_task("atr", holdout_frac=0.2)


@settings(max_examples=30, deadline=None)
@given(
    seed=SEEDS,
    spec=st.builds(
        GrammarSpec,
        n_terminals=st.integers(2, 50),
        n_nonterminals=st.integers(1, 40),
        max_rhs_len=st.integers(2, 10),
        max_rules=st.integers(1, 5),
        max_depth=st.integers(1, 10),
    ),
)
def test_every_derivation_terminates(seed, spec):
    g = build_grammar(spec, seed)
    for a in range(spec.n_nonterminals):  # nonterminals only expand into deeper-capped ones
        for r in range(g.n_rules[a]):
            nts = g.rhs_sym[a, r, : g.rhs_len[a, r]][~g.rhs_is_t[a, r, : g.rhs_len[a, r]]]
            assert (g.depth_cap[nts] > g.depth_cap[a]).all()
    f = derive(g, 64, np.random.default_rng(seed), max_length=2000)  # longer ones are dropped
    assert len(f.length) <= 64 and (f.length <= 2000).all()
    assert len(f.length) == 0 or f.depth.max() <= spec.max_depth
    assert ((f.label >= 0) & (f.label < spec.n_terminals)).all()


def check_batch(task, b):
    t, parent, depth = b.tokens, b.extra["parent"], b.extra["depth"]
    rows = torch.arange(len(b))
    key, value, sep, query = (b.roles[r] for r in ("key", "value", "sep", "query"))
    eos, pad = task.special_tokens["EOS"], task.special_tokens["PAD"]
    lo, hi = task.terminal_range
    assert (t[rows, sep] == eos).all() and (t[rows, b.lengths - 1] == eos).all()
    assert (query == sep + 1).all() and (b.answer_pos == query).all()
    assert (t[rows, query] == t[rows, key]).all() and (t[rows, value] == b.answer).all()
    assert (t[rows, query + 1] == b.answer).all()
    assert ((b.answer >= lo) & (b.answer < hi)).all()
    # the value role is the head (parent) of the key role in the example's tree
    assert (parent[rows, key] == value).all()
    positions = torch.arange(t.shape[1])[None]
    in_context = (positions > 0) & (positions < sep[:, None])
    # the key is the rightmost occurrence of its type in the context
    later = (t == t[rows, key][:, None]) & in_context & (positions > key[:, None])
    assert not later.any()
    # tree: one root per document, heads to the right, depth grows by 0 or 1 towards the leaves
    has_head = parent >= 0
    assert (has_head.sum(1) == sep - 2).all()
    assert (parent[has_head] > positions.expand_as(parent)[has_head]).all()
    step = depth[has_head] - depth[rows[:, None].expand_as(parent)[has_head], parent[has_head]]
    assert ((step == 0) | (step == 1)).all()
    assert ((depth > 0) == in_context).all()
    assert (t[positions >= b.lengths[:, None]] == pad).all()
    assert task.answer_derivable(b).all()


@settings(max_examples=25, deadline=None)
@given(seed=SEEDS, task=st.sampled_from([EASY, MEDIUM, LARGE, SPLIT]))
def test_parent_query_and_tree(seed, task):
    check_batch(task, task.sample(32, seed=seed))


@settings(max_examples=25, deadline=None)
@given(seed=SEEDS)
def test_generalisation_split_holds_pairs_out(seed):
    q_of = lambda b: b.tokens[torch.arange(len(b)), b.roles["query"]].numpy()  # noqa: E731
    for split, want in (("train", False), ("test", False), ("heldout", True)):
        b = SPLIT.sample(64, seed=seed, split=split)
        assert (SPLIT.is_heldout(q_of(b), b.answer.numpy()) == want).all()
    check_batch(SPLIT, SPLIT.sample(16, seed=seed, split="heldout"))


def test_heldout_share_of_pairs():
    t = np.arange(20)
    q, a = np.meshgrid(t, t)
    share = SPLIT.is_heldout(q.ravel() + 3, a.ravel() + 3).mean()
    assert 0.12 < share < 0.28  # 400 pairs, frac 0.2


def test_batched_generator_matches_reference():
    """Same grammar: the batched path and the recursive reference agree in distribution."""
    rng = np.random.default_rng(0)
    ref_len, ref_kv, ref_depth = [], [], []
    while len(ref_len) < 1500:
        labels, parent, depth = derive_one(EASY.grammar, rng)
        key = query_one(labels, parent, rng, lambda q, t: True)
        if key is None or len(labels) < 3:
            continue
        ref_len.append(len(labels) + 5)
        ref_kv.append(parent[key] - key)
        ref_depth.append(max(depth))
    s = example_stats(EASY.sample(3000, seed=0, split="test"))
    for ours, ref in ((s["length"], ref_len), (s["kv_distance"], ref_kv), (s["depth"], ref_depth)):
        se = np.sqrt(np.var(ours) / len(ours) + np.var(ref) / len(ref))
        assert abs(np.mean(ours) - np.mean(ref)) < 4 * se


@pytest.mark.parametrize("task", [EASY, MEDIUM], ids=["easy", "medium"])
def test_published_statistics(task):
    """The calibrated grammars land near the published generator's figures (paper_setup.md)."""
    s = example_stats(task.sample(1024, seed=1, split="test"))
    for name, ref in task.published_stats.items():
        for stat, value in ref.items():
            ours = {"mean": np.mean, "median": np.median, "max": np.max}[stat](s[name])
            tol = 0.35 if stat == "max" else 0.15
            assert abs(ours - value) <= tol * value, (name, stat, ours, value)


def test_tree_export():
    b = EASY.sample(4, seed=3)
    for i in range(4):
        tree = EASY.tree(b, i)
        text = tree.render()
        assert text.count("\n") + 1 == len(tree.positions) == int(b.roles["sep"][i]) - 1
        assert "[key]" in text and "[value]" in text
        assert tree.parent[tree.key] == tree.value and tree.parent[tree.root] == -1
        assert text.splitlines()[0].startswith(tree.tokens[tree.root])


def test_chance_accuracy_is_a_probability():
    assert 1 / EASY.grammar.n_terminals < EASY.chance_accuracy < 1
