"""Text from result files (study and run names, study.json, configs) put into the Markdown pages that MkDocs
and GitHub render: shown as text, never read as markup (no raw HTML, no link, no code span left open)."""

from __future__ import annotations

import html
import re


def md_text(value: object) -> str:
    """`value` as Markdown text on one line: HTML escaped (`<script>` shows as text) and the characters that
    open a link, a code span or emphasis (`[ ] ` * \\`) backslash-escaped."""
    text = html.escape(" ".join(str(value).split()), quote=False)
    return re.sub(r"([\\`*\[\]])", r"\\\1", text)


def md_code(value: object) -> str:
    """`value` as a Markdown code span on one line (shown literally), fenced by more backticks than it holds."""
    text = " ".join(str(value).split())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def slug(value: object) -> str:
    """`value` with every run of characters but letters, digits, `.`, `_` and `-` replaced by `-`: an HTML id,
    a link fragment and a file name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", str(value))
