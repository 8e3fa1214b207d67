"""`mecheval intervene RUN_DIR|SWEEP_DIR`: interchange interventions and mechanism verdicts per run.

Writes into each run directory `interventions.parquet` (all corrupt roles), `verdict.json`, and
`interventions/{corrupt}_{site}.png` (layer × position heatmaps); prints the verdict table.
`--over-training` instead reads the run's snapshots: `timeline.parquet` (the readouts at every kept
step, `interventions.timeline`) and a table of when the final mechanism formed.
The arguments are checked against the runs' tasks and models before any run is touched; a run
that cannot be read is reported and skipped, the others go on (exit 1 if any failed).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from mecheval.common import describe


def register(app: typer.Typer) -> None:
    @app.command()
    def intervene(
        path: Annotated[Path | None, typer.Argument(help="A run directory, or a sweep directory holding runs (not with --hf).", exists=True)] = None,
        corrupt: Annotated[list[str], typer.Option(help="Role(s) to corrupt; the first is the verdict's.")] = ["key"],
        n: Annotated[int, typer.Option(min=1, help="Examples per run.")] = 1024,
        sites: Annotated[list[str], typer.Option(help="Site names or globs, e.g. 'layers.*.resid_pre'.")] = ["*"],
        positions: Annotated[list[str] | None, typer.Option(help="Roles to patch (default: all).")] = None,
        seed: Annotated[int, typer.Option(help="Seed of the examples and corruptions.")] = 0,
        split: Annotated[str, typer.Option(help="Task split of the examples.")] = "test",
        direction: Annotated[str, typer.Option(help="sufficiency | necessity")] = "sufficiency",
        analysis: Annotated[list[str], typer.Option(help="Extra analyses: conv-window (where a short conv binds key and value); state (the answer each layer's recurrent state carries after the key, …, up to the answer).")] = [],
        method: Annotated[str, typer.Option(help="exact (one patched run per cell) | gradient (attribution patching: a first-order estimate of every cell from two forwards and a backward)")] = "exact",
        over_training: Annotated[bool, typer.Option("--over-training", help="The readouts at every snapshot of each run (timeline.parquet); only snapshots not yet read are computed.")] = False,
        hf: Annotated[str | None, typer.Option(help="A transformers causal LM (a save_pretrained directory, or a hub name in the local cache): AR in its own vocabulary (docs/huggingface.md).")] = None,
        hf_tokens: Annotated[str, typer.Option(help="With --hf: how keys and values are drawn from the model's tokens: random | words (single-token words; needs the tokenizer).")] = "random",
        hf_pairs: Annotated[int, typer.Option(min=1, help="With --hf: key-value pairs per AR example.")] = 16,
        out: Annotated[Path | None, typer.Option(help="With --hf: the output directory (default: intervene-<model name>).")] = None,
    ) -> None:
        """Interchange interventions per run: interventions.parquet, heatmaps, and the mechanism verdicts."""
        from rich.console import Console
        from rich.table import Table
        from tqdm import tqdm

        from mecheval.interventions.metrics import DIRECTIONS
        from mecheval.interventions.runs import find_runs, intervene_run

        from mecheval.interventions.patching import METHODS
        from mecheval.interventions.runs import ANALYSES

        if sorted(set(analysis) - set(ANALYSES)):
            raise typer.BadParameter(f"--analysis must be among {list(ANALYSES)}, got {analysis}")
        if direction not in DIRECTIONS:
            raise typer.BadParameter(f"--direction must be one of {DIRECTIONS}, got {direction!r}")
        if method not in METHODS:
            raise typer.BadParameter(f"--method must be one of {list(METHODS)}, got {method!r}")
        if (hf is None) == (path is None):
            raise typer.BadParameter("give a run or sweep directory, or --hf MODEL (not both)", param_hint="PATH / --hf")
        if hf is None:
            try:
                runs = find_runs(path)
            except FileNotFoundError as e:
                raise typer.BadParameter(str(e)) from None
        table = Table(title=f"mechanism: corrupt {corrupt[0]}, examples outside the conv reach (see detail)")
        table.add_column("run", overflow="fold")
        table.add_column("verdict", min_width=len("direct retrieval"))
        for col in ("effect", "layer", "@key", "@value", "@query"):
            table.add_column(col, no_wrap=True)
        table.add_column("detail", overflow="fold")
        if hf is not None:
            from mecheval.hf.ar import RULES, intervene_hf, load

            if hf_tokens not in RULES:
                raise typer.BadParameter(f"must be one of {list(RULES)}, got {hf_tokens!r}", param_hint="--hf-tokens")
            if over_training:
                raise typer.BadParameter("a transformers model has no snapshots", param_hint="--over-training")
            try:
                model, tokenizer = load(hf)
            except ValueError as e:
                raise typer.BadParameter(str(e), param_hint="--hf") from None
            out = out or Path(f"intervene-{Path(hf).name}")
            _, v = intervene_hf(model, tokenizer, hf, out, rule=hf_tokens, pairs=hf_pairs, corrupt=corrupt, n=n, sites=sites, positions=positions or None,
                                seed=seed, split=split, direction=direction, skip_missing_sites=True, analyses=analysis, method=method)
            _add_row(table, str(out), v)
            Console().print(table)
            return
        check_arguments(runs, corrupt, sites, positions or [], split)
        if over_training:
            _over_training(path, runs, corrupt[0], n, seed)
            return
        failed = []
        for run_dir in tqdm(runs, desc="intervene", unit="run", disable=len(runs) == 1):
            name = str(run_dir.relative_to(path)) if run_dir != path else run_dir.name
            try:
                _, v = intervene_run(run_dir, corrupt, n, sites, positions or None, seed, split, direction,
                                     analyses=analysis, method=method)
            except Exception as e:  # one bad run is reported and skipped
                failed.append(name)
                tqdm.write(f"skipped {name}: {describe(e)}", file=sys.stderr)
                table.add_row(name, "FAILED", "", "", "", "", "", "")
                continue
            _add_row(table, name, v)
        Console().print(table)
        if failed:
            typer.echo(f"error: {len(failed)} of {len(runs)} runs failed: {', '.join(failed)}", err=True)
            raise typer.Exit(1)


def _add_row(table, name: str, v) -> None:
    """A verdict's row of the table ("-" where there is none)."""
    if v is None:
        table.add_row(name, "-", "", "", "", "", "", "")
    else:
        table.add_row(name, v.label, f"{v.effect:.3f}", str(v.layer),
                      *(f"{x:.2f}" for x in (v.attrib_key, v.attrib_value, v.attrib_query)), v.detail)


def _over_training(path: Path, runs: list[Path], corrupt: str, n: int, seed: int) -> None:
    from rich.console import Console
    from rich.table import Table
    from tqdm import tqdm

    from mecheval.interventions.timeline import formed_at, timeline

    table = Table(title=f"over training: corrupt {corrupt}, {n} test examples, read outside the conv reach")
    for col in ("run", "snapshots", "final verdict", "formed at step", "acc at formation"):
        table.add_column(col, overflow="fold")
    failed = []
    for run_dir in tqdm(runs, desc="timeline", unit="run", disable=len(runs) == 1):
        name = str(run_dir.relative_to(path)) if run_dir != path else run_dir.name
        try:
            t = timeline(run_dir, n=n, corrupt=corrupt, seed=seed, quiet=len(runs) > 1)
        except Exception as e:  # one bad run is reported and skipped
            failed.append(name)
            tqdm.write(f"skipped {name}: {describe(e)}", file=sys.stderr)
            continue
        per_step = t.drop_duplicates("step").sort_values("step")
        step = formed_at(t)
        acc = "" if step is None else f"{per_step.set_index('step').loc[step, 'acc']:.2f}"
        table.add_row(name, str(len(per_step)), str(per_step["verdict"].iloc[-1]), "–" if step is None else str(step), acc)
    Console().print(table)
    if failed:
        typer.echo(f"error: {len(failed)} of {len(runs)} runs failed: {', '.join(failed)}", err=True)
        raise typer.Exit(1)


def check_arguments(runs: list[Path], corrupt: list[str], sites: list[str], positions: list[str], split: str) -> None:
    """--split, --corrupt and --positions against the first readable run's task; each --sites pattern
    must name a site of at least one run's model. A BadParameter names the option at fault."""
    import json

    import torch

    from mecheval.interventions.runs import present_sites
    from mecheval.models import build_model
    from mecheval.tasks import make_task
    from mecheval.training.run_dir import RunDir

    configs = {}
    for run_dir in runs:
        try:
            cfg = RunDir(run_dir).read_config()
        except (OSError, ValueError):
            continue  # reported when the run itself is skipped
        configs.setdefault(json.dumps(cfg.model.model_dump(mode="json"), sort_keys=True), cfg)
    if not configs:
        return
    first = next(iter(configs.values()))
    task = make_task(first.task.name, **first.task.params)
    if split not in task.splits:
        raise typer.BadParameter(f"{split!r} is not a split of {task.name}: {', '.join(task.splits)}", param_hint="--split")
    batch = task.sample(2, seed=0, split=split)
    for role in corrupt:
        try:
            task.corrupt(batch, role, 0)
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="--corrupt") from None
    unknown = [p for p in positions if p not in batch.roles]
    if unknown:
        raise typer.BadParameter(f"{unknown} are not roles of {task.name}: {', '.join(batch.roles)}", param_hint="--positions")
    names = set()
    for cfg in configs.values():
        with torch.device("meta"):
            names |= set(build_model(cfg.model).sites())
    missing = [p for p in sites if not present_sites(sorted(names), [p])]
    if missing:
        raise typer.BadParameter(f"{missing} match no site of these models; e.g. {sorted(names)[:4]}", param_hint="--sites")
