"""What a readout of a trained model reads: one validated `ReadoutSpec`, shared by `mecheval intervene`, the
studies and `intervene_run`, the options of attribution patching nested in it (`GradientOptions`).

    ReadoutSpec()                                         the CLI's defaults: key corrupted, every site, N_EXAMPLES
    ReadoutSpec(corrupt=["key", "value"], analyses=["conv-window"])
    ReadoutSpec(method="gradient", gradient=GradientOptions(verify=8))
A spec that does not validate raises `ReadoutSpecError`: one line naming the field at fault.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from mecheval.common import N_EXAMPLES, Checked, ConfigError

ANALYSES = ("conv-window", "state", "two-token", "rotary", "reflection", "all-terms")  # the optional analyses
# (`--analysis`; `runs.KEPT` their files; the last four are `terms.TERMS`)
VERDICT_ROLE = "key"  # the verdict's rules are for key corruption; other roles get attributions, no label


class ReadoutSpecError(ConfigError):
    """A readout spec that does not validate; `field` names the (first) field at fault."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


class _Spec(Checked):
    """A frozen pydantic model without unknown fields whose validation fails as one `ReadoutSpecError`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def __init__(self, **fields):
        try:
            super().__init__(**fields)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            got = f" (got {err['input']!r})" if err["type"] == "literal_error" else ""
            raise ReadoutSpecError(f"{type(self).__name__}: {where}: {err['msg'].removeprefix('Value error, ')}{got}",
                                   str(err["loc"][0]) if err["loc"] else "") from None


class GradientOptions(_Spec):
    """The options of attribution patching (`method="gradient"`), which exact patching has none of."""

    verify: int = Field(0, ge=0)  # patch the K cells with the highest estimate exactly (`interchange`'s `verify`)


class ReadoutSpec(_Spec):
    """The interchange experiments of a readout and the verdict read off them (`intervene_run`).

    corrupt: the roles corrupted, each a table; the verdict is read under key corruption in the sufficiency
    direction only (`labelled`). n, seed, split: the examples (prompts not seen in training). sites: names or
    globs; the layer profile (every `resid_pre`, the last `resid_post`) is always added; skip_missing_sites
    drops the patterns this model lacks. positions: `interchange`'s (None: every role and key&query).
    min_effect: the verdict's `not learned` filter (the study's: 0.01 on AR, 0.1 on ATR). analyses: among
    ANALYSES. method: "exact" (one patched run per cell) or "gradient" (attribution patching, its options in
    `gradient`; None: the defaults).
    """

    corrupt: tuple[str, ...] = Field((VERDICT_ROLE,), min_length=1)
    n: int = Field(N_EXAMPLES, ge=1)
    sites: tuple[str, ...] = ("*",)
    positions: tuple[str | int, ...] | None = None
    seed: int = 0
    split: str = "test"
    direction: Literal["sufficiency", "necessity"] = "sufficiency"
    min_effect: float = 0.01
    skip_missing_sites: bool = False
    analyses: tuple[Literal[ANALYSES], ...] = ()
    method: Literal["exact", "gradient"] = "exact"
    gradient: GradientOptions | None = None

    @field_validator("gradient")
    @classmethod
    def _gradient_only(cls, value: GradientOptions | None, info: ValidationInfo) -> GradientOptions | None:
        method = info.data.get("method")
        if value is not None and method != "gradient":
            raise ValueError(f"options of attribution patching: give them with `method='gradient'`, not {method!r}")
        return value

    @property
    def verify(self) -> int:
        """The cells patched exactly to check the gradient estimate (0: none, and always with method exact)."""
        return self.gradient.verify if self.gradient is not None else 0

    @property
    def labelled(self) -> bool:
        """Whether a verdict is read: under key corruption, in the sufficiency direction."""
        return VERDICT_ROLE in self.corrupt and self.direction == "sufficiency"

    @property
    def analysed_role(self) -> str:
        """The corrupted role the verdict and the analyses read: the key where corrupted, else the first."""
        return VERDICT_ROLE if VERDICT_ROLE in self.corrupt else self.corrupt[0]
