import pytest

from mecheval.study import Study, run_study
from mecheval.study.presets import _arch

TINY_AR = {"name": "ar", "params": {"n_pairs": 2, "n_keys": 8, "n_values": 8}}

TINY = Study(
    name="tiny",
    description="a tiny study for tests",
    cpu_drops="nearly everything",
    task=TINY_AR,
    cpu_task=TINY_AR,
    archs=[_arch("attention", d_model=16), _arch("mamba", d_model=16, d_conv=0)],
    steps=(60, 60),
    cpu_lrs=[1e-3, 3e-3],
    sites=("resid_pre", "conv_out", "core_out"),
    findings=("attention_induction", "mamba_noconv_fails", "h3_hyena_poor"),
)


@pytest.fixture(scope="session")
def tiny_study(tmp_path_factory):
    """(directory, Report) of TINY run once at cpu scale with one worker."""
    out = tmp_path_factory.mktemp("study")
    report = run_study(TINY, out, workers=1, n_examples=64, quiet=True)
    return out, report


TINY_HELDOUT = Study(
    name="tiny-heldout",
    description="ATR with held-out (query, target) pairs, for tests",
    cpu_drops="nearly everything",
    task={"name": "atr", "params": {"grammar": "easy", "holdout_frac": 0.2}},
    cpu_task={"name": "atr", "params": {"grammar": "easy", "holdout_frac": 0.2}},
    archs=[_arch("attention", d_model=16)],
    steps=(30, 30),
    base={"eval.splits": ["train", "test", "heldout"]},
    splits=("heldout",),
    min_effect=0.1,
)


@pytest.fixture(scope="session")
def tiny_heldout_study(tmp_path_factory):
    out = tmp_path_factory.mktemp("heldout")
    return out, run_study(TINY_HELDOUT, out, workers=1, n_examples=32, quiet=True)
