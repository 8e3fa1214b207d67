"""MkDocs hook: the CLI reference page, rendered from the `mecheval` command line itself (its click tree).

docs/reference/cli.md holds the marker `<!-- cli-reference -->`; each command (and sub-command) becomes a
section with its help text, usage line and a table of its arguments and options, read from the typer app
in `mecheval.cli`, so the page cannot drift from `mecheval COMMAND --help`.
"""

from __future__ import annotations

import click
import typer

MARKER = "<!-- cli-reference -->"


def _param_row(param: click.Parameter, ctx: click.Context) -> str:
    if isinstance(param, click.Argument):
        name, kind = f"`{param.human_readable_name}`", "argument"
    else:
        name, kind = ", ".join(f"`{o}`" for o in param.opts + param.secondary_opts), "flag" if param.is_flag else "option"
    kind += "" if param.required is False else ", required"
    if not getattr(param, "is_flag", False) and not isinstance(param.type, click.types.StringParamType):
        kind += f" ({param.type.name})"
    default = param.get_default(ctx) if not getattr(param, "hidden", False) else None
    shown = "" if default in (None, False, (), []) or isinstance(param, click.Argument) and param.required else f"`{default}`"
    help_text = (getattr(param, "help", None) or "").replace("|", "\\|").replace("\n", " ")
    return f"| {name} | {kind} | {shown} | {help_text} |"


def _command(cmd: click.Command, path: list[str], parent: click.Context | None) -> list[str]:
    ctx = click.Context(cmd, info_name=path[-1], parent=parent)
    out = [f"## `{' '.join(path)}`" if len(path) > 1 else "## `mecheval`", ""]
    if cmd.help:
        out += [click.unstyle(cmd.help).strip(), ""]
    out += ["```text", cmd.get_usage(ctx), "```", ""]
    params = [p for p in cmd.get_params(ctx) if not getattr(p, "hidden", False) and p.name != "help"]
    if params:
        out += ["| name | kind | default | help |", "|---|---|---|---|", *(_param_row(p, ctx) for p in params), ""]
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            out += _command(cmd.get_command(ctx, name), [*path, name], ctx)
    return out


def cli_reference() -> str:
    from mecheval.cli import app

    return "\n".join(_command(typer.main.get_command(app), ["mecheval"], None))


def on_page_markdown(markdown: str, page, config, files) -> str:
    return markdown.replace(MARKER, cli_reference()) if MARKER in markdown else markdown
