"""Named studies: each a sweep per scale plus what to intervene on, matching a section of the study.

`paper` scale: the published sizes (docs/published.md): AR with 16 pairs over
4096 + 4096 tokens, 50,016 steps of batch 32, widths 16–256, learning rates 3e-5–3e-3, one seed.
`cpu` scale: the same design at a size a 2-core CPU trains in minutes; each preset says what it drops.
The CPU AR task has 4 pairs over 64 + 64 tokens. Measured here (d=64, batch 128, lr 3e-3): attention
finds induction on 8 pairs within ~1,500 steps, but Mamba (d_conv 4) stays near chance on 8 pairs after
2,500 of 3,000 steps (test accuracy 0.23, chance 0.125), while on 4 pairs it reaches 0.84 by step 1,500
and 0.90 by step 2,000. Given 6,000 steps, Mamba does learn 8 pairs (0.98), and there H3 (0.43) and
Hyena (0.57) fall behind it (`examples/sweep_ar_8pairs.yaml`); on 4 pairs all three pass 0.85. The
published 16 pairs over 4096 + 4096 take tens of thousands of steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mecheval.common import set_dotted
from mecheval.interventions.spec import ReadoutSpec
from mecheval.models.presets import arch_label
from mecheval.training.config import ADDED_LATER

PAPER_WIDTHS = [16, 32, 64, 128, 256]
PAPER_LRS = [3e-5, 1e-4, 3e-4, 1e-3, 3e-3]
CPU_LR = 3e-3  # the cpu scale's one learning rate, unless a study gives its own
PAPER_TRAIN_SIZE = 100_032  # the published fixed training set (16 epochs of batch 32 on AR, 32 on ATR)
ZOO = ["attention", "based", "mamba", "deltanet", "hyena", "baseconv", "h3"]
# preset -> the `model.build` of its paper-scale runs: Mamba as the study's code builds it (init, final
# LayerNorm, norm eps, conv bias: docs/mamba-published-scale.md); the cpu scale keeps our default build
PAPER_BUILD = {"mamba": "study"}
# the fixed set's epochs in the one order the study's code reads them (Mamba at d = 64, lr 1e-2: 0.80, against
# 0.65 with a new order each epoch; docs/mamba-published-scale.md)
PAPER_TRAIN_ORDER = "replay"

AR_PAPER = {"name": "ar", "params": {}}
AR_CPU = {"name": "ar", "params": {"n_pairs": 4, "n_keys": 64, "n_values": 64}}
# the quick study's: on 4 pairs attention retrieves by a positional pointer on most seeds (results/cpu/quick seeds 1, 2),
# on 8 it does induction wherever it learns (results/cpu/attention-pairs, cpu/quick-8pairs, cpu/quick-8pairs-seeds345)
AR_CPU_QUICK = {"name": "ar", "params": {"n_pairs": 8, "n_keys": 64, "n_values": 64}}
ATR_GRAMMARS = ["easy", "medium", "large_vocab"]


def _base(task: dict, scale: str, steps_paper: int, steps_cpu: int) -> dict:
    """The training config shared by every run of a study at one scale (published optimiser); the weights
    are kept at snapshots for the readouts over training (`interventions.timeline`)."""
    if scale == "paper":  # the published fixed training set: 100,032 examples replayed for the epochs
        return {"task": task, "model": {"d_model": 64}, "steps": steps_paper, "batch_size": 32,
                "train_size": PAPER_TRAIN_SIZE, "eval": {"every": 2000, "size": 1024}, "checkpoint_every": 2000,
                "snapshots": {"every": 5000, "log": 8}}
    return {"task": task, "model": {"d_model": 64}, "steps": steps_cpu, "batch_size": 128,
            "eval": {"every": 500, "size": 512}, "checkpoint_every": 500, "snapshots": {"every": 250}}


def _arch(preset: str, lr: float | None = None, **fields) -> dict:
    """A sweep point: the preset, model fields, and the point's own learning rate (None: the study's grid)."""
    return {"model.preset": preset, **{f"model.{k}": v for k, v in fields.items()}} | ({} if lr is None else {"optim.lr": lr})


# the best AR rate of each architecture at d = 64 (results/paper-d64: ar-architectures, where 1e-3 learns
# fastest or alone for every mixer but Mamba; mamba-published for Mamba's study build)
AR_D64_LR = {"attention": 1e-3, "based": 1e-3, "mamba": 1e-2, "deltanet": 1e-3, "hyena": 1e-3, "baseconv": 1e-3, "h3": 1e-3}


# the first rate of each twist architecture on ATR easy at d = 64 (the paper scale's points; `--lrs` replaces
# them): attention at its best AR rate (AR_D64_LR); Mamba with and without its conv at 3e-3, the rate at which
# Mamba without its conv learned ATR easy best (results/paper-d64/atr-mamba-noconv: test accuracy 0.90, against
# 0.88 at 1e-3), so that the conv is the only difference between the two Mambas
ATR_EASY_D64_LR = {"attention": AR_D64_LR["attention"], "mamba": 3e-3}


# today's mixers (issue 57) -> the conv each is also run with: 4 where its paper has none (Mamba-3, GLA, RWKV-7,
# whose token shift is its own two-token mixing), 0 where it has one of 4 (Mamba-2, Gated DeltaNet, DeltaProduct)
MODERN_CONVS = {"mamba3": 4, "gated-deltanet": 0, "mamba2": 0, "gla": 4, "rwkv7": 4, "deltaproduct": 0}


def _deep(preset: str, n_layers: int, lr: float | None = None) -> dict:
    """`preset` with `n_layers` blocks. Based and BaseConv keep their layer-0 short conv 3 and repeat their
    second layer's mixer (Based linear attention; BaseConv's long conv) above it; with one layer, that layer
    is the second one's mixer for Based and the short conv 3 for BaseConv (the study does not say)."""
    fields: dict = {"n_layers": n_layers}
    if preset == "based":
        fields |= {"mixer": ["based"] if n_layers == 1 else ["baseconv"] + ["based"] * (n_layers - 1),
                   "d_conv": [None] if n_layers == 1 else [3] + [None] * (n_layers - 1)}
    elif preset == "baseconv":
        fields |= {"d_conv": [3] + ["long"] * (n_layers - 1)}
    return _arch(preset, lr, **fields)


@dataclass(frozen=True)
class Study:
    """A named study: `sweep(scale)` gives its sweep (SweepConfig data); interventions per run."""

    name: str
    description: str
    cpu_drops: str
    task: dict  # the paper-scale task (name + params)
    cpu_task: dict
    archs: list[dict]  # sweep points: one per architecture (preset + model overrides)
    steps: tuple[int, int]  # (paper, cpu)
    cpu_archs: list[dict] | None = None  # the architectures the cpu scale keeps (None: all of `archs`)
    cpu_lrs: list[float] = field(default_factory=lambda: [CPU_LR])  # empty: each of `cpu_archs` at its own rate
    cpu_seeds: tuple[int, ...] = ()  # the cpu scale's seeds where `--seeds` is not given (empty: seed 0 alone)
    paper_grid: dict[str, list] = field(default_factory=dict)  # axes only the paper scale sweeps (e.g. grammar)
    base: dict = field(default_factory=dict)  # dotted overrides of the base config at both scales
    cpu_base: dict = field(default_factory=dict)  # and at the cpu scale alone
    corrupt: tuple[str, ...] = ("key", "value")
    sites: tuple[str, ...] = ("resid_pre",)
    min_effect: float = 0.01  # the published filter: 0.01 on AR, 0.1 on ATR
    analyses: tuple[str, ...] = ()  # extra readouts of `intervene_run` (e.g. "conv-window")
    splits: tuple[str, ...] = ()  # further splits read as the test split is, into RUN/splits/<split>/ (no analyses)
    findings: tuple[str, ...] = ()  # ids of `mecheval.report.findings.FINDINGS` checked in the report
    cpu_measured: str = "not timed yet"  # how long the cpu scale took here, and on what
    # the paper scale's `length_groups` (its ATR batches pad to ~3x their tokens; benchmarks/length_groups.py)
    paper_length_groups: int = 1

    def sweep(
        self,
        scale: str,
        *,
        widths: list[int] | None = None,
        lrs: list[float] | None = None,
        seeds: list[int] | None = None,
        archs: list[str] | None = None,
        early_stop: bool = False,
        train_order: str | None = None,
        grammars: list[str] | None = None,
        grammar_draw: str | None = None,
        trackers: list[str] | None = None,
        build: str | None = None,
    ) -> dict:
        """The sweep at `scale`; widths / lrs / seeds replace the scale's axes (seeds: the cpu scale's default is
        `cpu_seeds`, else seed 0 alone, as at the paper scale), archs keeps only the
        architectures whose `point_label` is listed; early_stop ends a run at test accuracy >= 0.99 at
        two evaluations in a row (`TrainConfig.early_stop`); train_order reads the paper scale's fixed set
        in a new order each epoch ("shuffle") or in one order ("replay", the study's; the paper default);
        grammars replace an ATR study's grammars (e.g. ["easy"] for the paper scale's zoo on ATR easy); grammar_draw
        trains an ATR easy study on the published grammar itself ("published", documents drawn by our sampler) or,
        at the paper scale, on the published training set ("published-sets"; the generalisation language's:
        "published-split", "published-split-sets"; `ATRParams.grammar_draw`); trackers
        name the experiment trackers every run logs to (`TrainConfig.loggers`: "tensorboard", "wandb"); build sets
        every architecture's `model.build` ("study": the LM as the study's code builds it, for Mamba, attention and Based;
        None: PAPER_BUILD at the paper scale, our build at the cpu scale)."""
        if scale not in SCALES:
            raise ValueError(f"unknown scale {scale!r}; known: {SCALES}")
        paper = scale == "paper"
        points = self.archs if paper else self.cpu_archs or self.archs
        if archs is not None:
            points = _select_archs(points, archs, self.name)
        grid = {"model.d_model": widths or PAPER_WIDTHS, **self.paper_grid} if paper else {}
        if widths and not paper:
            grid["model.d_model"] = widths
        if not paper and not self.cpu_lrs and not lrs:  # each cpu point at its own rate; one without (a plug-in) at CPU_LR
            points = [p if "optim.lr" in p else {**p, "optim.lr": CPU_LR} for p in points]
        elif lrs or not paper or not all("optim.lr" in p for p in points):  # else every point brings its own rate
            grid["optim.lr"] = lrs or (PAPER_LRS if paper else self.cpu_lrs)
        seeds = seeds or (None if paper else list(self.cpu_seeds))
        if seeds:
            grid["seed"] = seeds
        if grammars is not None:
            grid["task.params.grammar"] = self._grammars(grammars, paper)
        task = self.task if paper else self.cpu_task
        if grammar_draw not in (None, "mecheval"):  # mecheval, the default, leaves the task as it is
            task = self._with_grammar_draw(task, grid.get("task.params.grammar"), grammar_draw, paper)
        base = _base(task, scale, *self.steps)
        for key, value in (self.base | ({} if paper else self.cpu_base)).items():
            set_dotted(base, key, value)
        if early_stop:
            base["early_stop"] = {"acc": 0.99, "patience": 2, "split": "test"}
        for tracker in trackers or []:
            set_dotted(base, f"loggers.{tracker}", True)
        if train_order is not None and not paper:
            raise ValueError("train_order applies to the paper scale's fixed training set (the cpu scale draws fresh data)")
        if paper:
            base["train_order"] = train_order or PAPER_TRAIN_ORDER
            if self.paper_length_groups != 1:
                base["length_groups"] = self.paper_length_groups
        if build is not None:
            points = [_with_build(p, build) for p in points]
        elif paper:
            points = [_with_paper_build(p) for p in points]
        return {"base": base, "list": points, "grid": grid}

    def readout(self, n: int, split: str = "test", skip: tuple[str, ...] = ()) -> ReadoutSpec:
        """What the study reads of each run (`intervene_run`): n examples of `split`, its corrupted roles, sites
        (those a model lacks skipped) and `not learned` filter; on the test split its analyses but those in `skip`,
        on a further split none."""
        analyses = [a for a in self.analyses if a not in skip] if split == "test" else []
        return ReadoutSpec(corrupt=self.corrupt, n=n, sites=self.sites, split=split, min_effect=self.min_effect,
                           skip_missing_sites=True, analyses=analyses)

    def _with_grammar_draw(self, task: dict, grammars: list[str] | None, draw: str, paper: bool) -> dict:
        """`task` (an ATR task) with `grammar_draw` set, checked against every grammar the sweep trains."""
        from pydantic import ValidationError

        from mecheval.tasks.atr.task import SET_DRAWS, ATRParams

        if task["name"] != "atr":
            raise ValueError(f"grammar_draw applies to ATR studies; {self.name!r} trains on {task['name']}")
        if draw in SET_DRAWS and not paper:
            raise ValueError(f"grammar_draw {draw!r} is the paper scale's fixed training set (the cpu scale "
                             f"draws fresh data); use {draw.removesuffix('-sets')!r}")
        params = {**task.get("params", {}), "grammar_draw": draw}
        for grammar in grammars or [params.get("grammar", "easy")]:
            try:
                ATRParams(**{**params, "grammar": grammar})
            except ValidationError as e:
                hint = " (give --grammars easy)" if grammar != "easy" else ""
                raise ValueError(f"{_reasons(e)}{hint}") from None
        return {**task, "params": params}

    def _grammars(self, grammars: list[str], paper: bool) -> list[str]:
        """`grammars` checked against the study's task: an ATR study, and grammars ATR knows."""
        task = (self.task if paper else self.cpu_task)["name"]
        if task != "atr":
            raise ValueError(f"grammars apply to ATR studies; {self.name!r} trains on {task}")
        unknown = [g for g in grammars if g not in ATR_GRAMMARS]
        if unknown or not grammars:
            raise ValueError(f"unknown grammars {unknown}; known: {ATR_GRAMMARS}")
        return list(grammars)


def default_build(preset: str | None, paper: bool) -> str:
    """The `model.build` a point of `preset` trains with where `--build` is not given: PAPER_BUILD's at the paper
    scale, ours otherwise."""
    return (PAPER_BUILD.get(preset) if paper else None) or ADDED_LATER["model.build"]


def _with_paper_build(point: dict) -> dict:
    """The point with its preset's paper-scale build (PAPER_BUILD), if it has one."""
    build = PAPER_BUILD.get(point.get("model.preset"))
    return point if build is None else {**point, "model.build": build}


def _with_build(point: dict, build: str) -> dict:
    """The point with `model.build` set to `build`; ValueError naming the architecture where its model cannot be
    built so (`ModelConfig`: the study's build is Mamba's and attention's)."""
    from pydantic import ValidationError

    from mecheval.models.config import ModelConfig

    fields = {k.removeprefix("model."): v for k, v in point.items() if k.startswith("model.")}
    if "hf" not in fields:
        try:
            ModelConfig(vocab_size=2, **fields, build=build)
        except ValidationError as e:
            raise ValueError(f"{point_label(point)}: {_reasons(e)}") from None
    return {**point, "model.build": build}


def _reasons(e) -> str:
    """A pydantic ValidationError's messages, as its validators raised them."""
    return "; ".join(str(err.get("ctx", {}).get("error", err["msg"])) for err in e.errors())


def point_label(point: dict) -> str:
    """A sweep point's architecture as `--archs` names it: `mamba`, `mamba (d_conv 0)`, `based (d_conv long)`,
    or a plug-in's import path (a mixer's, or a transformers model's class)."""
    if "model.preset" not in point:
        return point.get("model.hf") or point["model.mixer"]
    conv, layers, positions = (point.get(f"model.{k}") for k in ("d_conv", "n_layers", "pos_emb"))
    conv = None if layers is not None else conv[0] if isinstance(conv, list) else conv  # a deep point's convs are its depth's
    return arch_label(point["model.preset"], conv, layers, positions)


def _select_archs(points: list[dict], wanted: list[str], study: str) -> list[dict]:
    """The study's points named in `wanted`, then one point per plug-in import path in `wanted`
    (`examples.mixers.mamba2:Mamba2`: that mixer in every layer, on the study's design; a transformers
    model: `transformers:MambaForCausalLM`, or a model config `{hf: …, config: {…}}` such as
    `mecheval.hf.models:GPT2`, built at the study's width and depth)."""
    from mecheval.plugins import is_import_path

    plugins = [a for a in wanted if is_import_path(a)]
    added = [_plugin_point(path) for path in plugins]  # a broken plug-in is refused here, naming what is wrong
    labels = [point_label(p) for p in points]
    unknown = [a for a in wanted if a not in labels and a not in plugins]
    if unknown:
        raise ValueError(f"study {study!r} has no architecture {unknown}; known: {labels}, or a mixer's import path")
    return [p for p, label in zip(points, labels) if label in wanted] + added


def _plugin_point(path: str) -> dict:
    """The sweep point of an `--archs` import path: a mixer in every layer, or a transformers model (a class,
    or a mapping `{hf, config}`)."""
    from mecheval.models.mixers import mixer_spec
    from mecheval.plugins import load

    obj = load(path, "mixer")  # the error names it as before --archs took transformers models
    if isinstance(obj, dict) and "hf" in obj:
        return {"model.hf": obj["hf"], "model.config": dict(obj.get("config", {}))}
    if isinstance(obj, type) and getattr(obj, "config_class", None) is not None:
        return {"model.hf": path}
    mixer_spec(path)
    return {"model.mixer": path}


SCALES = ("cpu", "paper")
TIMELINE_EXAMPLES = 256  # examples of the readouts at each snapshot (the final readout uses the study's n)
AR_STEPS = (50_016, 3_000)
# the main job's Mambas': every Mamba seed of results/cpu/quick-8pairs{,-seeds345} that learned within 3,000 steps
# was at 0.71-0.98 by 2,000, and none that had not by then learned after. Attention keeps 3,000 (it stops early
# where it learns): trained to 2,000 on a schedule of 2,000 it learned in 2 of seeds 0-5, against 3 of 6 at 3,000
QUICK_CPU_STEPS = 2_000
ATR_STEPS = (100_032, 3_000)  # ATR: the same data sizes as AR but 32 epochs
# ATR's paper-scale length groups, measured (benchmarks/length_groups.py, Mamba, d = 64, batch 32): easy 1.36x
# the padded step with 2 groups, 1.31x with 3, 1.28x with 4; medium 2.11x / 2.55x / 2.38x
ATR_EASY_LENGTH_GROUPS, ATR_LENGTH_GROUPS = 2, 3

def _modern(name: str, on: str, task: dict, cpu_task: dict, steps: tuple[int, int], cpu_task_words: str, **fields) -> Study:
    """Today's recurrent mixers on one task, each with and without a short conv (MODERN_CONVS), at two rates and
    three seeds at the cpu scale; their readouts with the conv-window, state and term analyses (`terms.TERMS`)."""
    return Study(
        name=name,
        description=f"Today's recurrent mixers on {on}, each with and without a short convolution: induction or "
                    "direct retrieval, where key and value meet, and whether Mamba-3's two-token update or rotation (it "
                    "has no conv) plays the conv's role (each zeroed per layer: the `two-token` and `rotary` analyses, "
                    "both together: `all-terms`; DeltaProduct's negative eigenvalues: `reflection`).",
        cpu_drops=f"one width (64), learning rates {{3e-3, 1e-2}}, seeds 0, 1, 2, 3,000 steps of batch 128, "
                  f"{cpu_task_words}",
        task=task, cpu_task=cpu_task,
        archs=[variant for preset, other_conv in MODERN_CONVS.items()
               for variant in (_arch(preset), _arch(preset, d_conv=other_conv))],
        cpu_lrs=[3e-3, 1e-2], cpu_seeds=(0, 1, 2), steps=steps,
        analyses=("conv-window", "state", "two-token", "rotary", "reflection", "all-terms"), **fields,
    )


STUDIES: dict[str, Study] = {
    s.name: s
    for s in [
        Study(
            name="quick",
            cpu_measured="8.2 min with the install on 2 idle CPU cores, fresh clone (2026-12-05, `make run`: 5.8 min "
                         "training, 1.5 min readouts and report)",
            description="Attention vs Mamba vs Mamba without its short convolution on AR (the README's study).",
            cpu_drops="one width (64), 2,000 steps of batch 128 for both Mambas and up to 3,000 for attention (test "
                      "accuracy every 250), AR with 8 pairs over 64+64 tokens, attention at lr 3e-3 and both Mambas at 1e-2 (their published best d = 64 rate; at 3e-3 Mamba is near chance on 8 "
                      "pairs after 2,500 steps), seeds 0, 1, 2 (on 4 pairs attention learns a positional pointer, "
                      "not induction, on most seeds)",
            task=AR_PAPER, cpu_task=AR_CPU_QUICK,
            archs=[_arch("attention"), _arch("mamba"), _arch("mamba", d_conv=0)],
            cpu_archs=[_arch("attention", CPU_LR) | {"steps": AR_STEPS[1]}, _arch("mamba", AR_D64_LR["mamba"]),
                       _arch("mamba", AR_D64_LR["mamba"], d_conv=0)],
            cpu_lrs=[], cpu_seeds=(0, 1, 2),
            # a learner stops once it is done (attention: ~1,250 steps); readouts over training every 1,000 steps
            cpu_base={"early_stop": {"acc": 0.99, "patience": 2, "split": "test"}, "eval.every": 250,
                      "snapshots.every": 1000},
            steps=(AR_STEPS[0], QUICK_CPU_STEPS),
            findings=("attention_induction", "mamba_direct", "mamba_conv_forms", "mamba_noconv_fails"),
            # no state readout: no finding reads it, and it cost 2.4x the rest of a Mamba run's readouts (96 of
            # 137 CPU-s, results/cpu/quick-8pairs seed 0, n = 512)
            analyses=("conv-window",),
        ),
        Study(
            name="ar-architectures",
            cpu_measured="13.5 min on 2 shared CPU cores (2026-11-30)",
            description="The zoo on AR: accuracy by width, best learning rate, mechanism per architecture.",
            cpu_drops="one width (64), learning rates {1e-3, 3e-3}, 3,000 steps of batch 128, AR with 4 pairs over 64+64 tokens",
            task=AR_PAPER, cpu_task=AR_CPU, archs=[_arch(a) for a in ZOO], steps=AR_STEPS, cpu_lrs=[1e-3, 3e-3],
            analyses=("conv-window", "state"),
            findings=("attention_induction", "based_induction", "mamba_direct", "mamba_conv_forms", "h3_hyena_poor"),
        ),
        Study(
            name="ar-mamba-conv",
            cpu_measured="12.8 min on 2 shared CPU cores (2026-11-30)",
            description="Mamba with d_conv 0/1/2/3/4 on AR; interventions on the residual and inside the mixer.",
            cpu_drops="one width (64), one learning rate (3e-3), 3,000 steps of batch 128, AR with 4 pairs over 64+64 tokens",
            task=AR_PAPER, cpu_task=AR_CPU, archs=[_arch("mamba", d_conv=k) for k in (0, 1, 2, 3, 4)],
            steps=AR_STEPS, sites=("resid_pre", "conv_out", "core_out"), analyses=("conv-window", "state"),
            findings=("mamba_direct", "mamba_conv_forms", "mamba_noconv_fails", "mamba_conv1_fails"),
        ),
        Study(
            name="ar-based-conv",
            cpu_measured="4.1 min on 2 shared CPU cores (2026-11-30)",
            description="Based with its layer-0 convolution of kernel 1/2/3/4 or a long convolution, on AR.",
            cpu_drops="one width (64), one learning rate (3e-3), 3,000 steps of batch 128, AR with 4 pairs over 64+64 tokens",
            task=AR_PAPER, cpu_task=AR_CPU, archs=[_arch("based", d_conv=[k, 0]) for k in (1, 2, 3, 4, "long")],
            analyses=("conv-window", "state"),
            steps=AR_STEPS, findings=("based_induction", "based_long_fails"),
        ),
        Study(
            name="atr",
            cpu_measured="51 min on 2 shared CPU cores (2026-11-30; H3 and Mamba take 20 min each)",
            description="The three published grammars × the zoo on ATR, with interventions.",
            cpu_drops="the easy grammar only, one width (64), one learning rate (3e-3), 3,000 steps of batch 128",
            task={"name": "atr", "params": {}}, cpu_task={"name": "atr", "params": {"grammar": "easy"}},
            archs=[_arch(a) for a in ZOO], steps=ATR_STEPS, min_effect=0.1, paper_length_groups=ATR_LENGTH_GROUPS,
            paper_grid={"task.params.grammar": ATR_GRAMMARS}, findings=("atr_mamba_vs_attention", "atr_storage"),
        ),
        Study(
            name="atr-generalisation",
            cpu_measured="27.7 min on 2 shared CPU cores with --workers 1 (2026-11-30)",
            description="ATR easy with 20% of (query, target) pairs held out of training; accuracy on them.",
            cpu_drops="three mixers (attention, based, mamba), one width (64), one learning rate (3e-3), "
                      "3,000 steps of batch 128",
            task={"name": "atr", "params": {"grammar": "easy", "holdout_frac": 0.2}},
            cpu_task={"name": "atr", "params": {"grammar": "easy", "holdout_frac": 0.2}},
            archs=[_arch(a) for a in ZOO] + [_arch("mamba", d_conv=0)],
            cpu_archs=[_arch(a) for a in ("attention", "based", "mamba")],
            steps=ATR_STEPS, min_effect=0.1, paper_length_groups=ATR_EASY_LENGTH_GROUPS,
            base={"eval.splits": ["train", "test", "heldout"]}, splits=("heldout",), findings=("atr_heldout_storage",),
        ),
        Study(
            name="ar-depth",
            cpu_measured="not timed yet",
            description="The zoo on AR with 1 and 3 layers; attention without position embeddings, Based with them.",
            cpu_drops="one width (64), one learning rate (3e-3; the paper scale runs each architecture at its best "
                      "d = 64 AR rate), 3,000 steps of batch 128, AR with 4 pairs over 64+64 tokens",
            task=AR_PAPER, cpu_task=AR_CPU,
            archs=[_deep(a, n, AR_D64_LR[a]) for n in (1, 3) for a in ZOO]
                  + [_arch("attention", AR_D64_LR["attention"], pos_emb="none"),
                     _arch("based", AR_D64_LR["based"], pos_emb="learned")],
            steps=AR_STEPS, sites=("resid_pre", "conv_out", "core_out"), analyses=("conv-window",),
            findings=("one_layer_fails", "one_layer_mamba", "three_layers_learn", "attention_needs_positions",
                      "based_with_positions"),
        ),
        Study(
            name="atr-depth",
            cpu_measured="not timed yet",
            description="ATR easy with 1 layer: attention, Based, BaseConv and Mamba.",
            cpu_drops="one width (64), one learning rate (3e-3; the paper scale runs each architecture at its best "
                      "d = 64 ATR easy rate, or its AR one where ATR has only one), 3,000 steps of batch 128",
            task={"name": "atr", "params": {"grammar": "easy"}}, cpu_task={"name": "atr", "params": {"grammar": "easy"}},
            archs=[_deep(a, 1, (AR_D64_LR | ATR_EASY_D64_LR)[a]) for a in ("attention", "based", "baseconv", "mamba")],
            steps=ATR_STEPS, min_effect=0.1, paper_length_groups=ATR_EASY_LENGTH_GROUPS,
            sites=("resid_pre", "conv_out", "core_out"), findings=("atr_one_layer_convs", "atr_one_layer_mamba"),
        ),
        Study(
            name="atr-mamba-noconv",
            cpu_measured="19.2 min on 2 shared CPU cores (2026-11-30)",
            description="Mamba without its short convolution on ATR easy (and with it, for contrast).",
            cpu_drops="one width (64), one learning rate (3e-3), 3,000 steps of batch 128",
            task={"name": "atr", "params": {"grammar": "easy"}}, cpu_task={"name": "atr", "params": {"grammar": "easy"}},
            archs=[_arch("attention", ATR_EASY_D64_LR["attention"]), _arch("mamba", ATR_EASY_D64_LR["mamba"]),
                   _arch("mamba", ATR_EASY_D64_LR["mamba"], d_conv=0)], steps=ATR_STEPS, min_effect=0.1,
            paper_length_groups=ATR_EASY_LENGTH_GROUPS, analyses=("conv-window", "state"),
            findings=("atr_mamba_vs_attention", "atr_mamba_noconv_induction"),
        ),
        _modern("modern", "AR", AR_PAPER, AR_CPU, AR_STEPS, "AR with 4 pairs over 64+64 tokens",
                cpu_measured="Mamba-3's two variants (--archs 'mamba3,mamba3 (d_conv 4)', --early-stop): 55 min on 2 "
                             "CPU cores shared with another study (40 core-min training, 2026-12-05); the others not timed"),
        _modern("modern-atr", "ATR easy", {"name": "atr", "params": {"grammar": "easy"}},
                {"name": "atr", "params": {"grammar": "easy"}}, ATR_STEPS, "ATR easy", min_effect=0.1,
                paper_length_groups=ATR_EASY_LENGTH_GROUPS),
    ]
}
