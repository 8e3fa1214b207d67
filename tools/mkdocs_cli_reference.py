"""MkDocs hook: the CLI reference page, rendered from the `mecheval` command line itself (its command tree).

docs/reference/cli.md holds the marker `<!-- cli-reference -->`; each command (and sub-command) becomes a
section with its help text, usage line and a table of its arguments and options, read from the typer app
in `mecheval.cli`, so the page cannot drift from `mecheval COMMAND --help`. The tree is read through the
click interface typer builds (duck-typed: typer may vendor its own click).
"""

from __future__ import annotations

import re

import typer

MARKER = "<!-- cli-reference -->"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _cell(text: str) -> str:
    return ANSI.sub("", text or "").replace("|", "\\|").replace("\n", " ").strip()


def _param_row(param, ctx) -> str:
    """One table row: the name(s), the kind with its type as `--help` shows it, the default, the help."""
    flag = getattr(param, "is_flag", False)
    if param.param_type_name == "argument":
        name, kind = f"`{param.name.upper()}`", "argument"
    else:
        name, kind = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts]), "flag" if flag else "option"
    shown_type = None if flag else param.display_type_rich(ctx)
    if shown_type:
        kind += f" `{ANSI.sub('', str(shown_type))}`"
    if param.required:
        kind += ", required"
    default = param.get_default(ctx)
    shown = "" if default is None or default is False or default in ("", (), []) else f"`{default}`"
    return f"| {name} | {kind} | {shown} | {_cell(getattr(param, 'help', None))} |"


def _command(cmd, path: list[str], parent) -> list[str]:
    ctx = cmd.context_class(cmd, info_name=path[-1], parent=parent)
    out = [f"## `{' '.join(path)}`", ""]
    if cmd.help:
        out += [ANSI.sub("", cmd.help).strip(), ""]
    out += ["```text", cmd.get_usage(ctx), "```", ""]
    params = [p for p in cmd.get_params(ctx) if not getattr(p, "hidden", False) and p.name != "help"]
    if params:
        out += ["| name | kind | default | help |", "|---|---|---|---|", *(_param_row(p, ctx) for p in params), ""]
    for name in cmd.list_commands(ctx) if hasattr(cmd, "list_commands") else []:
        out += _command(cmd.get_command(ctx, name), [*path, name], ctx)
    return out


def cli_reference() -> str:
    from mecheval.cli import app

    return "\n".join(_command(typer.main.get_command(app), ["mecheval"], None))


def on_page_markdown(markdown: str, page, config, files) -> str:
    return markdown.replace(MARKER, cli_reference()) if MARKER in markdown else markdown
