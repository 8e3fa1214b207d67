"""AR: the published document layout, its roles and token ranges, uniform queries (determinism:
test_determinism.py)."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mecheval.tasks import make_task

SEEDS = st.integers(0, 2**31 - 1)
PUBLISHED = make_task("ar")
SMALL = make_task("ar", n_pairs=8, n_keys=64, n_values=64)
TINY = make_task("ar", n_pairs=5, n_keys=5, n_values=6)  # every key used: the dense draw path


@settings(max_examples=40, deadline=None)
@given(seed=SEEDS, task=st.sampled_from([PUBLISHED, SMALL, TINY]))
def test_documents_roles_and_ranges(seed, task):
    b = task.sample(64, seed=seed)
    n = task.params.n_pairs
    t = b.tokens
    rows = torch.arange(len(b))
    assert t.shape == (64, 2 * n + 5) and (b.lengths == 2 * n + 5).all()
    bos, eos = task.special_tokens["BOS"], task.special_tokens["EOS"]
    assert (t[:, 0] == bos).all() and (t[:, 2 * n + 1] == eos).all() and (t[:, -1] == eos).all()
    keys, values = t[:, 1 : 2 * n + 1 : 2], t[:, 2 : 2 * n + 2 : 2]
    (k0, k1), (v0, v1) = task.key_range, task.value_range
    assert ((keys >= k0) & (keys < k1)).all() and ((values >= v0) & (values < v1)).all()
    assert k1 <= v0 and max(task.special_tokens.values()) < k0 and v1 == task.vocab_size
    assert all(len(set(row.tolist())) == n for row in keys)  # keys unique within a document
    assert all(len(set(row.tolist())) == n for row in values)
    # roles point at the right tokens; the answer is the value following the queried key in context
    key, value, sep, query = (b.roles[r] for r in ("key", "value", "sep", "query"))
    assert (t[rows, key] == t[rows, query]).all()
    assert (value == key + 1).all() and (t[rows, value] == b.answer).all()
    assert (t[rows, sep] == eos).all() and (query == sep + 1).all() and (b.answer_pos == query).all()
    assert (t[rows, b.answer_pos + 1] == b.answer).all()
    assert task.answer_derivable(b).all()


def test_queries_uniform_over_pairs():
    b = SMALL.sample(8000, seed=0)
    counts = torch.bincount((b.roles["key"] - 1) // 2, minlength=8).float()
    assert (counts / counts.sum() - 1 / 8).abs().max() < 0.02
    assert SMALL.chance_accuracy == 1 / 8
