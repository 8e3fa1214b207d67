"""Our results beside the published ones: the accuracy and the verdict the study reports per run."""

from __future__ import annotations

import re

from mecheval.report import published

_LABEL = re.compile(r"^(?P<arch>[\w+]+)(?: \(d_conv (?P<conv>\w+)\))?$")


def _conv(text: str | None):
    return None if text is None else int(text) if text.isdigit() else text


def published_accuracy(task: str, grammar: str | None, label: str, width: int) -> float | None:
    """The published accuracy of architecture `label` (as `mecheval.study.results.arch_label` writes
    it) at `width` on the task, or None where the study reports none."""
    m = _LABEL.match(label)
    if m is None:
        return None
    arch, conv = m["arch"], _conv(m["conv"])
    if task == "ar":
        table = (
            published.AR_ACCURACY.get(arch) if conv is None
            else published.MAMBA_AR_BY_CONV.get(conv) if arch == "mamba"
            else published.BASED_AR_BY_CONV.get(conv) if arch == "based"
            else None
        )
        return None if table is None else table.get(width)
    if task == "atr" and conv is None:
        return published.ATR_ACCURACY.get(grammar or "easy", {}).get(arch, {}).get(width)
    return None


def published_verdict(task: str, label: str) -> str | None:
    """The mechanism the study reports for `label` on the task (None where it reports none)."""
    if task == "ar":
        return published.AR_VERDICT.get(label)
    if task == "atr":
        return published.ATR_VERDICT.get(label)
    return None
