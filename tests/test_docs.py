"""The documentation's generated parts: the CLI reference covers every command, the nav names real pages."""

import importlib.util
import re
from pathlib import Path

import typer
import yaml

from mecheval.cli import app

ROOT = Path(__file__).resolve().parents[1]


def _hook():
    spec = importlib.util.spec_from_file_location("mkdocs_cli_reference", ROOT / "tools" / "mkdocs_cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _commands(cmd, path):
    """Every command path of the CLI, read from typer's command tree."""
    yield " ".join(path)
    ctx = cmd.context_class(cmd, info_name=path[-1])
    for name in cmd.list_commands(ctx) if hasattr(cmd, "list_commands") else []:
        yield from _commands(cmd.get_command(ctx, name), [*path, name])


def test_cli_reference_has_every_command_and_option():
    page = _hook().on_page_markdown("# CLI\n\n<!-- cli-reference -->\n", None, None, None)
    headings = re.findall(r"^## `(.*)`$", page, re.M)
    assert headings == list(_commands(typer.main.get_command(app), ["mecheval"]))
    assert {"mecheval report", "mecheval intervene", "mecheval data show"} <= set(headings)
    intervene = page[page.index("## `mecheval intervene`"):page.index("## `mecheval study`")]
    assert "| `--n` | option `<int range>` | `512` | Examples per run (the API's N_EXAMPLES" in intervene
    assert "| `--seed` | option `<int>` | `0` |" in intervene  # a default of 0 is shown


def _nav_pages(nav):
    for item in nav:
        for value in item.values() if isinstance(item, dict) else [item]:
            yield from _nav_pages(value) if isinstance(value, list) else [value]


def test_nav_names_existing_pages():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    pages = list(_nav_pages(config["nav"]))
    assert "reference/cli.md" in pages and "reference/api.md" in pages
    assert [p for p in pages if not (ROOT / "docs" / p).exists()] == []


def _hidden_options(cmd, ctx=None):
    """The spellings of every hidden (deprecated) option of the CLI, e.g. `--param`."""
    for param in getattr(cmd, "params", []):
        if getattr(param, "hidden", False):
            yield from (o for o in param.opts if o.startswith("--"))
    ctx = cmd.context_class(cmd)
    for name in cmd.list_commands(ctx) if hasattr(cmd, "list_commands") else []:
        yield from _hidden_options(cmd.get_command(ctx, name))


def test_readme_and_docs_use_no_deprecated_option():
    hidden = set(_hidden_options(typer.main.get_command(app)))
    assert "--param" in hidden
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = [f"{p.relative_to(ROOT)}: {o}" for p in pages for o in hidden
             if re.search(rf"{re.escape(o)}(?![\w-])", p.read_text())]
    assert found == []
