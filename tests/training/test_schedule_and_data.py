import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mecheval.tasks import make_task
from mecheval.training.config import OptimConfig
from mecheval.training.data import TrainStream, derive_seed, eval_sets
from mecheval.training.schedule import lr_at


@given(total=st.integers(10, 5000), warmup=st.floats(0.01, 0.5), lr=st.floats(1e-5, 1e-1))
def test_warmup_then_cosine(total, warmup, lr):
    o = OptimConfig(lr=lr, warmup=warmup)
    lrs = [lr_at(s, total, o) for s in range(total)]
    warm = round(warmup * total)
    assert all(0 < x <= lr * (1 + 1e-12) for x in lrs[:-1])
    assert all(a < b for a, b in zip(lrs[:warm], lrs[1:warm]))  # rising during warmup
    assert abs(max(lrs) - lr) <= 1e-12 * lr  # reaches the peak
    assert all(a >= b for a, b in zip(lrs[warm:], lrs[warm + 1 :]))  # then decays
    assert lrs[-1] < 0.01 * lr + lr / max(1, total - warm)  # to (nearly) zero


def test_constant_schedule_after_warmup():
    o = OptimConfig(lr=1e-3, warmup=0.1, schedule="constant")
    assert [lr_at(s, 100, o) for s in (10, 50, 99)] == [1e-3] * 3
    assert lr_at(0, 100, o) == 1e-4


def test_seeds_are_distinct_and_stable():
    seeds = {derive_seed(0, "train", s) for s in range(1000)} | {derive_seed(1, "train", s) for s in range(1000)}
    assert len(seeds) == 2000 and all(0 <= s < 2**63 for s in seeds)
    assert derive_seed(0, "train", 5) == derive_seed(0, "train", 5)


TASK = make_task("ar", n_pairs=4, n_keys=16, n_values=16)


def test_stream_is_step_indexed():
    a, b = TrainStream(TASK, 8, seed=3), TrainStream(TASK, 8, seed=3)
    assert torch.equal(a.batch(7).tokens, b.batch(7).tokens)  # no hidden state: any order, same batch
    assert not torch.equal(a.batch(7).tokens, a.batch(8).tokens)
    assert not torch.equal(a.batch(7).tokens, TrainStream(TASK, 8, seed=4).batch(7).tokens)


@settings(max_examples=15, deadline=None)
@given(pool=st.integers(4, 40), batch=st.integers(1, 16), epochs=st.integers(1, 3))
def test_pool_epochs_visit_every_example_once(pool, batch, epochs):
    stream = TrainStream(TASK, batch, seed=0, pool_size=pool)
    steps = -(-epochs * pool // batch)
    rows = torch.cat([stream.batch(s).tokens for s in range(steps)])[: epochs * pool]
    as_set = lambda t: sorted(map(tuple, t.tolist()))  # noqa: E731
    for e in range(epochs):
        assert as_set(rows[e * pool : (e + 1) * pool]) == as_set(stream.pool.tokens)
    assert torch.equal(stream.batch(steps - 1).tokens, TrainStream(TASK, batch, 0, pool).batch(steps - 1).tokens)


@settings(max_examples=15, deadline=None)
@given(pool=st.integers(4, 40), batch=st.integers(1, 16))
def test_replay_reads_the_pool_in_the_same_order_every_epoch(pool, batch):
    stream = TrainStream(TASK, batch, seed=0, pool_size=pool, order="replay")
    steps = -(-3 * pool // batch)
    rows = torch.cat([stream.batch(s).tokens for s in range(steps)])[: 3 * pool]
    assert torch.equal(rows, stream.pool.tokens.repeat(3, 1))  # the pool as sampled, three times over
    shuffled = TrainStream(TASK, batch, seed=0, pool_size=pool)
    assert torch.equal(shuffled.pool.tokens, stream.pool.tokens)  # the order is all that differs


def test_eval_sets_depend_only_on_their_seed():
    a, b = eval_sets(TASK, ["train", "test"], 16, 5), eval_sets(TASK, ["train", "test"], 16, 5)
    assert all(torch.equal(a[s].tokens, b[s].tokens) for s in a)
    assert not torch.equal(a["train"].tokens, a["test"].tokens)
