"""Study presets: every preset expands to valid, distinctly named runs of the architectures it names."""

import json

import pandas as pd
import pytest

from mecheval.study.presets import PAPER_LRS, PAPER_WIDTHS, SCALES, STUDIES, point_label
from mecheval.sweeps import SweepConfig, expand


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("name", list(STUDIES))
def test_every_preset_expands_to_valid_runs(name, scale):
    study = STUDIES[name]
    runs = expand(SweepConfig.model_validate(study.sweep(scale)))
    archs = study.archs if scale == "paper" else study.cpu_archs or study.archs
    own_rates = all("optim.lr" in a for a in archs)  # each point at its own rate (paper scale)
    n_grid = len(PAPER_WIDTHS) * (1 if own_rates else len(PAPER_LRS)) if scale == "paper" else len(study.cpu_lrs) or 1
    for values in study.paper_grid.values() if scale == "paper" else []:
        n_grid *= len(values)
    n_grid *= 1 if scale == "paper" else len(study.cpu_seeds) or 1  # the cpu scale's default seeds
    assert len(runs) == len(archs) * n_grid
    assert len({r.name for r in runs}) == len(runs)
    presets = {r.config.model.preset for r in runs}
    assert presets == {a["model.preset"] for a in archs}


def test_paper_scale_is_the_published_setup():
    runs = expand(SweepConfig.model_validate(STUDIES["ar-architectures"].sweep("paper")))
    cfg = runs[0].config
    assert (cfg.steps, cfg.batch_size, cfg.optim.weight_decay, cfg.optim.warmup) == (50_016, 32, 0.0, 0.1)
    assert cfg.task.name == "ar" and cfg.task.params == {}
    assert {r.config.model.d_model for r in runs} == set(PAPER_WIDTHS)
    assert {r.config.optim.lr for r in runs} == set(PAPER_LRS)


def test_mamba_conv_ablation_varies_only_the_conv():
    runs = expand(SweepConfig.model_validate(STUDIES["ar-mamba-conv"].sweep("cpu")))
    assert sorted(r.config.model.d_conv[0] for r in runs) == [0, 1, 2, 3, 4]
    assert all(r.config.model.mixer == ["mamba", "mamba"] and r.config.model.mlp == [False, False] for r in runs)


def test_based_conv_ablation_changes_layer_zero_only():
    runs = expand(SweepConfig.model_validate(STUDIES["ar-based-conv"].sweep("cpu")))
    assert sorted(map(str, (r.config.model.d_conv[0] for r in runs))) == ["1", "2", "3", "4", "long"]
    assert all(r.config.model.d_conv[1] == 0 and r.config.model.mixer == ["baseconv", "based"] for r in runs)


def test_unknown_scale_is_an_error():
    with pytest.raises(ValueError, match="unknown scale"):
        STUDIES["quick"].sweep("laptop")


def test_paper_scale_axes_restrict_the_sweep_and_keep_the_fixed_training_set():
    sweep = STUDIES["ar-architectures"].sweep("paper", widths=[64], lrs=[3e-4, 1e-3], archs=["attention", "h3"])
    runs = expand(SweepConfig.model_validate(sweep))
    assert sorted(r.name for r in runs) == [
        "d_model-64_preset-attention_lr-0.0003", "d_model-64_preset-attention_lr-0.001",
        "d_model-64_preset-h3_lr-0.0003", "d_model-64_preset-h3_lr-0.001",
    ]
    assert {r.config.train_size for r in runs} == {100_032}
    assert all(r.config.early_stop is None for r in runs)


def test_cpu_seeds_and_conv_labels_select_runs():
    sweep = STUDIES["quick"].sweep("cpu", seeds=[0, 1, 2], archs=["mamba (d_conv 0)"], early_stop=True)
    runs = expand(SweepConfig.model_validate(sweep))
    assert [(r.config.seed, r.config.model.d_conv) for r in runs] == [(s, [0, 0]) for s in (0, 1, 2)]
    assert runs[0].config.early_stop.acc == 0.99
    with pytest.raises(ValueError, match="no architecture"):
        STUDIES["quick"].sweep("cpu", archs=["mamba (d_conv 3)"])


@pytest.mark.parametrize("name", ["ar-architectures", "ar-mamba-conv", "atr-mamba-noconv"])
def test_paper_scale_mamba_is_built_as_the_study_builds_it(name):
    paper = expand(SweepConfig.model_validate(STUDIES[name].sweep("paper", widths=[64], lrs=[1e-2])))
    cpu = expand(SweepConfig.model_validate(STUDIES[name].sweep("cpu")))
    for r in paper:
        m = r.config.model
        if m.preset == "mamba":
            assert (m.build, m.init, m.final_norm, m.final_norm_bias, m.norm_eps) == ("study", "zoology", "layernorm", True, 1e-5)
            assert m.options.get("mamba", {}).get("conv_bias", False) == (m.d_conv[0] != 0)
            assert "build-study" in r.name
        else:
            assert m.build == "mecheval" and m.init == "mecheval"
    assert all(r.config.model.build == "mecheval" and r.config.model.norm_eps is None for r in cpu)


def test_paper_scale_reads_the_fixed_set_in_the_studys_order_unless_told():
    runs = lambda **kw: expand(SweepConfig.model_validate(STUDIES["ar-architectures"].sweep("paper", widths=[64], lrs=[1e-3], **kw)))  # noqa: E731
    assert {r.config.train_order for r in runs()} == {"replay"}
    shuffled = runs(train_order="shuffle")
    assert {r.config.train_order for r in shuffled} == {"shuffle"}
    assert "train_order" not in shuffled[0].config.identity()  # the committed d = 64 runs keep their fingerprints
    assert all(r.config.train_order == "shuffle" for r in expand(SweepConfig.model_validate(STUDIES["quick"].sweep("cpu"))))
    with pytest.raises(ValueError, match="train_order applies to the paper scale"):
        STUDIES["quick"].sweep("cpu", train_order="replay")


def test_grammars_restrict_an_atr_study_and_are_refused_elsewhere():
    runs = lambda **kw: expand(SweepConfig.model_validate(STUDIES["atr"].sweep("paper", widths=[64], lrs=[1e-3], **kw)))  # noqa: E731
    assert {r.config.task.params["grammar"] for r in runs()} == {"easy", "medium", "large_vocab"}
    assert {r.config.task.params["grammar"] for r in runs(grammars=["easy"])} == {"easy"}
    cpu = expand(SweepConfig.model_validate(STUDIES["atr-mamba-noconv"].sweep("cpu", grammars=["large_vocab"])))
    assert {r.config.task.params["grammar"] for r in cpu} == {"large_vocab"}
    with pytest.raises(ValueError, match="grammars apply to ATR studies; 'quick' trains on ar"):
        STUDIES["quick"].sweep("cpu", grammars=["easy"])
    with pytest.raises(ValueError, match=r"unknown grammars \['hard'\]"):
        STUDIES["atr"].sweep("paper", grammars=["easy", "hard"])


def test_depth_study_runs_each_architecture_at_its_own_rate_and_depth():
    sweep = STUDIES["ar-depth"].sweep("paper", widths=[64])
    runs = {point_label(p): r for p, r in zip(sweep["list"], expand(SweepConfig.model_validate(sweep)))}
    assert (runs["attention (1 layer)"].config.optim.lr, runs["mamba (1 layer)"].config.optim.lr) == (1e-3, 1e-2)
    assert runs["mamba (3 layers)"].config.model.n_layers == 3
    assert runs["based (3 layers)"].config.model.mixer == ["baseconv", "based", "based"]
    assert runs["baseconv (1 layer)"].config.model.d_conv == [3]
    assert runs["attention (no positions)"].config.model.pos_emb == "none"
    assert runs["based (positions)"].config.model.pos_emb == "learned"
    # --lrs replaces the points' own rates; the cpu scale runs its one rate
    swept = expand(SweepConfig.model_validate(STUDIES["ar-depth"].sweep("paper", widths=[64], lrs=[3e-4],
                                                                        archs=["mamba (1 layer)"])))
    assert [r.config.optim.lr for r in swept] == [3e-4]
    assert {r.config.optim.lr for r in expand(SweepConfig.model_validate(STUDIES["ar-depth"].sweep("cpu")))} == {3e-3}


def test_atr_depth_runs_the_twist_architectures_at_their_atr_rates():
    sweep = STUDIES["atr-depth"].sweep("paper", widths=[64])
    lrs = {point_label(p): r.config.optim.lr for p, r in zip(sweep["list"], expand(SweepConfig.model_validate(sweep)))}
    # Mamba's ATR easy rate (3e-3) differs from its AR one (1e-2); the others have one measured rate, AR's
    assert lrs == {"attention (1 layer)": 1e-3, "mamba (1 layer)": 3e-3, "based (1 layer)": 1e-3,
                   "baseconv (1 layer)": 1e-3}


def test_labels_name_depth_and_positions_as_reports_read_them_from_configs():
    from mecheval.store.identity import arch_parts, arch_variant
    from mecheval.models.presets import arch_label

    sweep = STUDIES["ar-depth"].sweep("paper", widths=[64])
    for point, run in zip(sweep["list"], expand(SweepConfig.model_validate(sweep))):
        flat = pd.json_normalize(run.config.model_dump(mode="json")).iloc[0]
        row = pd.Series({k: json.dumps(v) if k in ("model.mixer", "model.d_conv") else v for k, v in flat.items()})
        assert arch_label(*arch_parts(row), *arch_variant(row)) == point_label(point)
