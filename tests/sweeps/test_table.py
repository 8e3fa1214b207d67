import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from mecheval.sweeps.table import best_lr, flatten, varying

METRIC = "summary.final.test.acc"


def test_flatten_dotted_and_json_lists():
    assert flatten({"model": {"mixer": ["a", "b"], "d_model": 16}, "x": None}) == {
        "model.mixer": '["a", "b"]', "model.d_model": 16, "x": None}


runs = st.lists(
    st.tuples(st.sampled_from(["attention", "based"]), st.sampled_from([16, 32]), st.sampled_from([1e-3, 3e-3, 1e-2]),
              st.floats(0, 1), st.booleans()),
    min_size=1, max_size=30, unique_by=lambda r: r[:3],
)


@settings(max_examples=30, deadline=None)
@given(runs)
def test_best_lr_is_the_max_per_group(rows):
    df = pd.DataFrame(
        [{"name": f"r{i}", "status": "done" if done else "unfinished", "model.mixer": m, "model.d_model": d,
          "optim.lr": lr, "steps": 10, METRIC: acc} for i, (m, d, lr, acc, done) in enumerate(rows)])
    best = best_lr(df)
    done = df[df.status == "done"]
    keys = [c for c in varying(done) if c != "optim.lr"]
    assert len(best) == (done.groupby(keys).ngroups if keys else min(1, len(done)))
    for _, row in best.iterrows():
        group = done[(done[keys] == row[keys]).all(axis=1)] if keys else done
        assert row[METRIC] == group[METRIC].max()
        assert row["optim.lr"] == group[group[METRIC] == row[METRIC]]["optim.lr"].min()  # ties: smaller lr


seeded_runs = st.lists(
    st.tuples(st.sampled_from(["attention", "based"]), st.sampled_from([1e-3, 3e-3]), st.sampled_from([0, 1, 2]),
              st.sampled_from([0.0, 0.25, 0.5, 1.0])),
    min_size=1, max_size=20, unique_by=lambda r: r[:3],
)


@settings(max_examples=40, deadline=None)
@given(seeded_runs)
def test_best_lr_over_seeds_compares_rates_on_shared_seeds_and_keeps_every_seed_of_the_best(rows):
    df = pd.DataFrame([{"name": f"r{i}", "status": "done", "model.mixer": m, "optim.lr": lr, "seed": seed, METRIC: acc}
                       for i, (m, lr, seed, acc) in enumerate(rows)])
    best = best_lr(df)
    for mixer, runs in df.groupby("model.mixer"):
        shared = set.intersection(*(set(r["seed"]) for _, r in runs.groupby("optim.lr")))
        means = (runs[runs["seed"].isin(shared)] if shared else runs).groupby("optim.lr")[METRIC].mean()
        want_lr = min(lr for lr, m in means.items() if m == means.max())
        chosen = best[best["model.mixer"] == mixer] if "model.mixer" in best else best
        assert set(chosen["name"]) == set(runs[runs["optim.lr"] == want_lr]["name"])


def test_a_field_missing_as_none_in_one_study_and_nan_in_another_is_one_value():
    """Tables collected from two studies: a field the runs lack reads None in one and NaN in the other. The
    runs are one design: one best rate between them, not one per spelling of 'missing'."""
    one = pd.DataFrame([{"name": "a", "status": "done", "model.norm_eps": None, "optim.lr": 3e-4, METRIC: 0.87}])
    other = pd.DataFrame([{"name": "b", "status": "done", "model.norm_eps": float("nan"), "optim.lr": 1e-3, METRIC: 0.89}])
    df = pd.concat([one, other], ignore_index=True)
    assert df["model.norm_eps"].iloc[0] is None  # as `pd.concat` of two studies' tables leaves it
    assert varying(df) == ["optim.lr"]
    assert list(best_lr(df)["name"]) == ["b"]


def test_one_lucky_seed_at_a_rate_does_not_outrank_three_at_another():
    """Mamba at d = 64: seed 0 at 3e-3 reads 0.74; at 1e-2 seeds 0, 1, 2 read 0.77, 0.70 and 0.00 (mean 0.49).
    On the seed both rates ran, 1e-2 is the better, and all three of its seeds are kept."""
    df = pd.DataFrame([{"name": n, "status": "done", "optim.lr": lr, "seed": seed, METRIC: acc}
                       for n, lr, seed, acc in [("a", 3e-3, 0, 0.74), ("b", 1e-2, 0, 0.77), ("c", 1e-2, 1, 0.70),
                                                ("d", 1e-2, 2, 0.00)]])
    assert list(best_lr(df)["name"]) == ["b", "c", "d"]
    assert list(best_lr(df.assign(seed=[3, 0, 1, 2]))["name"]) == ["a"]  # no shared seed: the means of all decide


def test_best_lr_of_a_table_without_a_finished_run_is_empty():
    df = pd.DataFrame({"name": ["a", "b"], "status": ["diverged", "unfinished"], "optim.lr": [3e-2, 1e-2]})
    assert best_lr(df).empty  # no summary columns at all: nothing to choose, no error
