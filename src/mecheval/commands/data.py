"""`mecheval data show|stats`: look at a task's examples and their statistics."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from mecheval.commands.options import example, parse_overrides
from mecheval.tasks import make_task
from mecheval.tasks.base import Task
from mecheval.tasks.batch import Batch
from mecheval.tasks.stats import example_stats, summarize

ROLE_STYLES = {"key": "bold cyan", "value": "bold green", "sep": "magenta", "query": "bold yellow"}

data_app = typer.Typer(help="Inspect tasks: examples with their roles, and statistics.", no_args_is_help=True,
                       epilog=example("mecheval data show ar --n 3", "mecheval data stats atr"))

TASK_ARG = typer.Argument(..., help="task name: ar, mqar, atr, or an import path (mypkg.tasks:MyTask)")
SET_OPT = typer.Option([], "--set", help="a task parameter key=value (value as YAML), repeatable, e.g. --set n_pairs=8")
PARAM_OPT = typer.Option([], "--param", "-p", hidden=True, help="deprecated spelling of --set")
SPLIT_OPT = typer.Option("train", "--split", help="train, test (or heldout for ATR with holdout_frac)")


def build(task: str, sets: list[str], params: list[str]) -> Task:
    """The task with its --set parameters (and those of the deprecated --param/-p, with a note)."""
    if params:
        typer.echo("note: --param/-p is deprecated; use --set key=value", err=True)
    try:
        return make_task(task, **parse_overrides([*params, *sets]))
    except ValueError as err:  # unknown task or invalid parameters (pydantic names the field)
        raise typer.BadParameter(str(err), param_hint="TASK / --set") from err


def draw(task: Task, n: int, seed: int, split: str) -> Batch:
    if split not in task.splits:
        raise typer.BadParameter(f"{split!r} is not a split of {task.name}: {task.splits}", param_hint="--split")
    return task.sample(n, seed=seed, split=split)


def render_example(task: Task, batch: Batch, i: int) -> Text:
    """The tokens of example i, roles coloured, then a line naming every role and the answer."""
    n = int(batch.lengths[i])
    words = task.decode(batch.tokens[i, :n])
    style: dict[int, str] = {}
    for role, pos in batch.roles.items():
        for p in pos[i].reshape(-1).tolist():
            style.setdefault(p, ROLE_STYLES.get(role, "bold"))
    line = Text()
    for p, w in enumerate(words):
        line.append(w, style=style.get(p))
        line.append(" ")
    roles = "  ".join(
        f"{role}@{p}={words[p]}"
        for role, pos in batch.roles.items()
        for p in pos[i].reshape(-1).tolist()
    )
    answers = ", ".join(
        f"{a} (predicted at {p})"
        for a, p in zip(task.decode(batch.answer[i].reshape(-1)), batch.answer_pos[i].reshape(-1).tolist())
    )
    line.append(f"\n  roles: {roles}\n  answer: {answers}")
    return line


@data_app.command("show", epilog=example("mecheval data show ar --set n_pairs=8 --n 3", "mecheval data show atr --split test"))
def show(
    task: str = TASK_ARG,
    n: int = typer.Option(2, "--n", min=1, help="examples to print (a few to read; `stats` computes over many)"),
    seed: int = typer.Option(0, "--seed", help="sampling seed"),
    split: str = SPLIT_OPT,
    set_: list[str] = SET_OPT,
    param: list[str] = PARAM_OPT,
) -> None:
    """Print examples with the roles marked (and, for ATR, the dependency tree)."""
    t = build(task, set_, param)
    batch = draw(t, n, seed, split)
    console = Console(soft_wrap=True)
    console.print(f"{t.name}: {t.params.model_dump()}  vocab={t.vocab_size}", highlight=False)
    for i in range(n):
        console.print(Text(f"[{i}] ") + render_example(t, batch, i), highlight=False)
        if hasattr(t, "tree"):
            console.print(Text(t.tree(batch, i).render()))


@data_app.command("stats", epilog=example("mecheval data stats ar --set n_pairs=8 --set n_keys=64", "mecheval data stats atr --n 4096"))
def stats(
    task: str = TASK_ARG,
    n: int = typer.Option(1024, "--n", min=1, help="examples the statistics are computed over"),
    seed: int = typer.Option(0, "--seed", help="sampling seed"),
    split: str = typer.Option("test", "--split", help="split to sample"),
    set_: list[str] = SET_OPT,
    param: list[str] = PARAM_OPT,
) -> None:
    """Print length, key-value distance and tree-depth statistics (and published figures)."""
    t = build(task, set_, param)
    values = example_stats(draw(t, n, seed, split))
    published = getattr(t, "published_stats", {})
    table = Table()
    cols = ["mean", "std", "min", "median", "p90", "max"]
    table.add_column("statistic")
    for c in cols:
        table.add_column(c, justify="right")
    table.add_column("published")
    for name, v in values.items():
        s = summarize(v)
        ref = "  ".join(f"{k}≈{x:g}" for k, x in published.get(name, {}).items())
        table.add_row(name, *(f"{s[c]:.2f}" if c in ("mean", "std") else f"{s[c]:g}" for c in cols), ref)
    console = Console(width=120, soft_wrap=True)
    console.print(f"{t.name} {t.params.model_dump()}: {n} {split} examples", highlight=False)
    console.print(table)
    console.print(f"chance accuracy: {t.chance_accuracy:.3f}", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")
