"""`ModelConfig`: a validated description of an LM; per-layer fields resolve to published defaults."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator, model_validator

from mecheval.common import Checked, format_validation_error
from mecheval.models.kinds import model_kind
from mecheval.models.presets import ARCHITECTURES
from mecheval.models.shortconv import ConvSpec, validate_conv_spec
from mecheval.plugins import PluginError

# sizes no model of this library needs, refused before anything is allocated (a typo, or a planted config)
MAX_VOCAB, MAX_WIDTH, MAX_LAYERS, MAX_LEN = 2**20, 2**14, 2**10, 2**17
MAX_TABLE = 2**30  # values of the token or position embedding (4 GiB as float32): vocab_size (max_len) × d_model

NormKind = Literal["layernorm", "rmsnorm"]
# `build: study`: the LM fields of the study's code (tinylang's Zoology LM: zoology's init and final
# LayerNorm, mamba_ssm's RMSNorm eps); see docs/mamba-published-scale.md
STUDY_BUILD = {"init": "zoology", "final_norm": "layernorm", "final_norm_bias": True, "norm_eps": 1e-5}
# zoology's block type of each mixer the study's code builds (`zoology.model._init_weights` inits them apart);
# Based's hybrid (BaseConv, then Based) is two TransformerBlocks, as tinylang builds it; see docs/based-study-build.md
ZOOLOGY_BLOCKS = {"mamba": "MambaBlock", "attention": "TransformerBlock", "based": "TransformerBlock",
                  "baseconv": "TransformerBlock"}
# ... the mixers whose output projection zoology's init rescales as a residual (its name test matches attention's
# `out_proj`, not Based's `proj_o`): mixer -> our attribute
ZOOLOGY_RESCALED = {"attention": "out"}
# ... and the study build's further fields per block type, each option only for a mixer the model has: mamba_ssm's
# conv bias (where every layer of the mixer has a short conv); the biases of zoology's TransformerBlock (its
# LayerNorms and MLP, attention's output projection, BaseConv's Conv1d and projection)
STUDY_BUILD_BLOCK = {"MambaBlock": {"options": {"mamba": {"conv_bias": True}}},
                     "TransformerBlock": {"block_bias": True,
                                          "options": {"attention": {"out_bias": True},
                                                      "baseconv": {"conv_bias": True, "proj_bias": True}}}}


def _per_layer(value: Any, n_layers: int, field: str) -> list:
    """A scalar broadcast to every layer, or a list that must have one entry per layer."""
    if isinstance(value, list):
        if len(value) != n_layers:
            raise ValueError(f"{field} lists {len(value)} values but n_layers={n_layers}")
        return list(value)
    return [value] * n_layers


class ModelConfig(Checked):
    """An LM: embedding (+ learned positions) -> n_layers pre-norm blocks -> final norm -> tied head.

    Per-layer fields (`mixer`, `d_conv`, `mlp`, `norm`) take one value for every layer or a list with
    one per layer (a hybrid is a list of mixers). Fields left None take the published default of the
    layer's mixer (e.g. Mamba: d_conv 4, no MLP, RMSNorm). After validation every per-layer field is a
    concrete list, so a dumped config is complete. `preset` names an architecture of the study
    (`mecheval.models.presets.ARCHITECTURES`, e.g. "based" = baseconv then based); explicit fields win.
    """

    model_config = ConfigDict(extra="forbid")

    preset: str | None = None
    vocab_size: int = Field(gt=0, le=MAX_VOCAB)
    d_model: int = Field(64, gt=0, le=MAX_WIDTH)
    n_layers: int = Field(2, gt=0, le=MAX_LAYERS)
    mixer: str | list[str] = Field("attention", description="a zoo name or an import path 'package.module:Class'")
    d_conv: ConvSpec | None | list[ConvSpec | None] = None
    mlp: bool | None | list[bool | None] = None
    norm: NormKind | None | list[NormKind | None] = None
    pos_emb: Literal["learned", "none"] | None = None
    max_len: int = Field(1024, gt=0, le=MAX_LEN)
    mlp_ratio: int = Field(4, gt=0, le=64)
    tie_embeddings: bool = True
    final_norm: NormKind | None = Field(None, description="the norm before the head; None: the last layer's")
    final_norm_bias: bool = Field(False, description="a bias in the final norm (a LayerNorm), as the study's code has")
    norm_eps: float | None = Field(
        None, gt=0, description="eps of every norm; None: torch's defaults (LayerNorm 1e-5, RMSNorm finfo(float32).eps"
        " ≈ 1.2e-7); the study's code: 1e-5 for both, which counts where the residual stream starts at std 0.02"
    )
    init: Literal["mecheval", "zoology"] = Field(
        "mecheval",
        description="mecheval: h_0 = sqrt(D) E, E ~ N(0, 1/D), P ~ N(0, 1). zoology (Mamba, attention, Based and"
        " BaseConv models), as the study's code: h_0 = E + P, both ~ N(0, 0.02^2); each Mamba out_proj re-drawn and"
        " divided by sqrt(n_layers); in the other blocks every Linear ~ N(0, 0.02^2), attention's output projection"
        " and the MLP's down projection ~ N(0, 0.02^2 / (2 n_layers)), biases zero; convs keep their own draw",
    )
    init_std: float | None = Field(
        None, gt=0, description="std of the token embeddings; None: d_model ** -0.5 (init mecheval), 0.02 (zoology)"
    )
    block_bias: bool = Field(False, description="biases in the blocks' LayerNorms and MLPs, as zoology's TransformerBlock has")
    options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    build: Literal["mecheval", "study"] = Field(
        "mecheval",
        description="study (Mamba, attention or Based models): the LM as the study's code builds it, where a field is"
        " not set explicitly: init zoology, final LayerNorm with a bias, norm eps 1e-5; Mamba: the conv bias of"
        " mamba_ssm (when every layer has a short conv; d_conv 0 has no conv and so no bias); attention and Based:"
        " biases in the block norms and the MLP, and in attention's output projection, BaseConv's conv and its"
        " projection (docs/based-study-build.md)",
    )

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("preset") is not None:
            name = data["preset"]
            if name not in ARCHITECTURES:
                raise ValueError(f"unknown preset {name!r}; known: {sorted(ARCHITECTURES)}")
            data = {**ARCHITECTURES[name], **data}
        return data

    @field_validator("d_conv", mode="before")  # before: a bool must not pass as int
    @classmethod
    def _check_conv(cls, v):
        for spec in v if isinstance(v, list) else [v]:
            if spec is not None:
                validate_conv_spec(spec)
        return v

    @model_validator(mode="after")
    def _resolve(self) -> "ModelConfig":
        from mecheval.models.mixers import mixer_spec

        for field, rows in (("vocab_size", self.vocab_size), ("max_len", self.max_len)):
            if rows * self.d_model > MAX_TABLE:
                raise ValueError(f"{field} × d_model = {rows * self.d_model:,} embedding values, at most {MAX_TABLE:,}")
        n = self.n_layers
        mixers = _per_layer(self.mixer, n, "mixer")
        specs = [mixer_spec(m) for m in mixers]  # zoo names or import paths; errors name what is wrong
        convs = _per_layer(self.d_conv, n, "d_conv")
        mlps = _per_layer(self.mlp, n, "mlp")
        norms = _per_layer(self.norm, n, "norm")
        for i, s in enumerate(specs):
            convs[i] = s.default_conv if convs[i] is None else convs[i]
            if convs[i] != 0 and not s.has_conv:
                raise ValueError(f"d_conv: layer {i} mixer {mixers[i]!r} has no convolution (use 0)")
            mlps[i] = s.default_mlp if mlps[i] is None else mlps[i]
            norms[i] = s.default_norm if norms[i] is None else norms[i]
        if self.build == "study":
            self._apply_study_build(mixers, convs)
        for name in dict.fromkeys([*self.options, *mixers]):
            try:
                mixer_spec(name).options(**self.options.get(name, {})).check(self.d_model)
            except ValidationError as e:
                raise ValueError(f"options.{name}.{format_validation_error(e, '; ')}") from None
            except (PluginError, ValueError) as e:
                raise ValueError(f"options.{name}: {e}") from None
        if self.init == "zoology" and not set(mixers) <= set(ZOOLOGY_BLOCKS):
            raise ValueError(f"init 'zoology' is the study's scheme for {', '.join(ZOOLOGY_BLOCKS)} blocks only; "
                             f"mixers are {mixers}")
        # Write the resolution back (bypassing validation: these are already valid).
        object.__setattr__(self, "mixer", mixers)
        object.__setattr__(self, "d_conv", convs)
        object.__setattr__(self, "mlp", mlps)
        object.__setattr__(self, "norm", norms)
        if self.final_norm is None:
            object.__setattr__(self, "final_norm", norms[-1])
        if self.final_norm_bias and self.final_norm != "layernorm":
            raise ValueError(f"final_norm_bias needs final_norm 'layernorm' (an RMSNorm has no bias), got {self.final_norm!r}")
        if self.pos_emb is None:
            object.__setattr__(self, "pos_emb", "learned" if any(s.positions for s in specs) else "none")
        return self

    def _apply_study_build(self, mixers: list[str], convs: list) -> None:
        """`build: study`: the fields of STUDY_BUILD and of the block type's STUDY_BUILD_BLOCK (an option only
        for a mixer the model has, and only where it has what the option sets: a conv bias where each of that
        mixer's layers has a short conv), where not set explicitly. Every layer's block type must be one, and
        no layer a long conv (the study's long conv is not rebuilt)."""
        blocks = {ZOOLOGY_BLOCKS.get(m) for m in mixers}
        if len(blocks) != 1 or None in blocks:
            raise ValueError(f"build 'study' is the study's code's LM of {', '.join(ZOOLOGY_BLOCKS)} models only "
                             f"(one zoology block type in every layer); mixers are {mixers}")
        if "long" in convs:
            raise ValueError("build 'study' does not rebuild the study's implicit long conv (d_conv 'long')")
        fields = {**STUDY_BUILD, **STUDY_BUILD_BLOCK[blocks.pop()]}
        short = {m: all(isinstance(c, int) and c >= 1 for mm, c in zip(mixers, convs) if mm == m) for m in mixers}
        options = {m: {o: v for o, v in opts.items() if o != "conv_bias" or short[m]}  # no conv, no conv bias
                   for m, opts in fields.pop("options").items() if m in short}
        for name, value in fields.items():
            if name not in self.model_fields_set:
                object.__setattr__(self, name, value)
        merged = {m: {**opts, **self.options.get(m, {})} for m, opts in options.items() if opts}
        object.__setattr__(self, "options", {**self.options, **merged})

    def mixer_options(self, name: str):
        """The validated options of mixer `name` (its defaults updated by `options[name]`)."""
        from mecheval.models.mixers import mixer_spec

        return mixer_spec(name).options(**self.options.get(name, {}))


class HFModelConfig(BaseModel):
    """A `transformers` causal LM built with random weights from its config (the optional extra `hf`), trained
    and read like a zoo model: `model: {hf: MambaForCausalLM, config: {state_size: 16}}`. `hf` is a class of
    `transformers` or an import path to one; `config` its config's fields, except the three mecheval sets
    (vocab_size, d_model -> hidden_size, n_layers -> num_hidden_layers, so sweeps and reports read them as
    for any model). Checked and built by the kind "hf" (`models.kinds`: `mecheval.hf.build`, imported on first
    use), wrapped by `mecheval.hf.wrap`."""

    model_config = ConfigDict(extra="forbid")

    hf: str = Field(description="a transformers class (MambaForCausalLM) or an import path 'package.module:Class'")
    config: dict[str, Any] = Field(default_factory=dict)
    vocab_size: int = Field(gt=0, le=MAX_VOCAB)
    d_model: int = Field(64, gt=0, le=MAX_WIDTH)
    n_layers: int = Field(2, gt=0, le=MAX_LAYERS)

    @model_validator(mode="after")
    def _check(self) -> "HFModelConfig":
        owned = sorted({"vocab_size", "hidden_size", "num_hidden_layers"} & set(self.config))
        if owned:
            raise ValueError(f"config: {owned} are set by model.vocab_size / d_model / n_layers, not in config")
        model_kind("hf").check(self)
        return self

    def transformers_config(self) -> dict[str, Any]:
        """The transformers config's fields. The class's own bos / eos ids (GPT-2's 50256) are unset unless
        `config` names them: the task's vocabulary has its own, and theirs may lie outside it."""
        return {"bos_token_id": None, "eos_token_id": None, **self.config, "vocab_size": self.vocab_size,
                "hidden_size": self.d_model, "num_hidden_layers": self.n_layers}


def is_hf_model(data: Any) -> str:
    """The model config's kind: "hf" for a transformers model (a mapping with `hf`), else "lm"."""
    return "hf" if isinstance(data, HFModelConfig) or (isinstance(data, dict) and "hf" in data) else "lm"


AnyModelConfig = Annotated[
    Annotated[ModelConfig, Tag("lm")] | Annotated[HFModelConfig, Tag("hf")], Discriminator(is_hf_model)
]
