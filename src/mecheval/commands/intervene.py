"""`mecheval intervene RUN_DIR|SWEEP_DIR`: interchange interventions and mechanism verdicts per run.

Writes into each run directory (or `--out DIR`) `interventions.parquet` (all corrupt roles), `verdict.json`
(key corruption only), and `interventions/{corrupt}_{site}.png` (layer × position heatmaps); prints the
verdict table. Earlier analyses not asked for are kept; readouts of another kind are not written over
without `--replace`.
`--over-training` instead reads the run's snapshots: `timeline.parquet` (the readouts at every kept
step, `interventions.timeline`) and a table of when the final mechanism formed.
The arguments are checked against the runs' tasks and models before any run is touched; a run
that cannot be read is reported and skipped, the others go on (exit 1 if any failed).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from mecheval.commands.options import example, split_list
from mecheval.common import MAX_N_EXAMPLES
from mecheval.errors import describe
from mecheval.training.lock import DirLock


def register(app: typer.Typer) -> None:
    from mecheval.common import N_EXAMPLES

    @app.command(epilog=example(
        "mecheval intervene runs/mamba",
        "mecheval intervene runs/mamba --analysis conv-window --positions key,key+1,query,5",
        "mecheval intervene sweep/ --corrupt value --out /tmp/value-readouts",
    ))
    def intervene(
        ctx: typer.Context,
        path: Annotated[Optional[Path], typer.Argument(help="A run directory, or a sweep directory holding runs (not with --hf).", exists=True)] = None,
        corrupt: Annotated[list[str], typer.Option(help="Role(s) to corrupt, e.g. key,value. The verdict is read under key corruption only; other roles get attributions, no label.")] = ["key"],
        n: Annotated[int, typer.Option(min=1, max=MAX_N_EXAMPLES, help="Examples per run (the API's N_EXAMPLES; `mecheval study` uses the same).")] = N_EXAMPLES,
        sites: Annotated[list[str], typer.Option(help="Site names or globs, e.g. 'layers.*.resid_pre',conv_out.")] = ["*"],
        positions: Annotated[Optional[list[str]], typer.Option(help="Positions to patch: roles (query), role offsets (key+3, value-1), integers, joined with & to patch together (key&query). Default: every role and key&query.")] = None,
        seed: Annotated[int, typer.Option(help="Seed of the examples and corruptions.")] = 0,
        split: Annotated[str, typer.Option(help="Task split of the examples.")] = "test",
        direction: Annotated[Literal["sufficiency", "necessity"], typer.Option(help="sufficiency: the corrupted run with the clean activation patched in; necessity: the reverse.")] = "sufficiency",
        analysis: Annotated[list[str], typer.Option(help="Extra analyses: conv-window (where a short conv binds key and value); state (the answer each layer's recurrent state carries after the key, …, up to the answer); two-token (Mamba-3's previous-token term, RWKV-7's token shift, zeroed per layer); rotary (Mamba-3's rotation angle steps zeroed per layer); reflection (DeltaProduct's negative eigenvalues: β clamped at 1 per layer). An analysis not asked for keeps its earlier files.")] = [],
        method: Annotated[Literal["exact", "gradient"], typer.Option(help="exact (one patched run per cell) or gradient (attribution patching: a first-order estimate of every cell from two forwards and a backward, with the AtP* corrections; docs/attribution-patching.md).")] = "exact",
        verify: Annotated[int, typer.Option(min=0, help="With --method gradient: patch the K cells with the highest estimate exactly (column verified) and print the largest error seen and a recall bound.")] = 0,
        out: Annotated[Optional[Path], typer.Option(help="Write the outputs here (a sweep's runs under their relative paths) instead of into each run directory; with --hf, default intervene-<model name>.", file_okay=False)] = None,
        replace: Annotated[bool, typer.Option("--replace", help="Write over a run's readouts of another kind (corrupted roles, direction, method); refused without it.")] = False,
        over_training: Annotated[bool, typer.Option("--over-training", help="The readouts at every snapshot of each run (timeline.parquet); only snapshots not yet read are computed.")] = False,
        hf: Annotated[Optional[str], typer.Option(help="A transformers causal LM (a save_pretrained directory, or a hub name in the local cache): AR in its own vocabulary (docs/huggingface.md).")] = None,
        hf_tokens: Annotated[str, typer.Option(help="With --hf: how keys and values are drawn from the model's tokens: random | words (single-token words; needs the tokenizer).")] = "random",
        hf_pairs: Annotated[int, typer.Option(min=1, help="With --hf: key-value pairs per AR example.")] = 16,
    ) -> None:
        """Interchange interventions per run: interventions.parquet, heatmaps, and the mechanism verdicts."""
        from rich.console import Console
        from tqdm import tqdm

        from mecheval.interventions.readout import read_point_attributions
        from mecheval.interventions.runs import find_runs, intervene_run
        from mecheval.interventions.spec import VERDICT_ROLE

        spec = readout_spec(corrupt=split_list(corrupt), n=n, sites=split_list(sites), positions=split_list(positions),
                            seed=seed, split=split, direction=direction, analyses=split_list(analysis), method=method,
                            verify=verify, skip_missing_sites=hf is not None)
        if (hf is None) == (path is None):
            raise typer.BadParameter("give a run or sweep directory, or --hf MODEL (not both)", param_hint="PATH / --hf")
        if hf is not None:
            _hf(hf, hf_tokens, hf_pairs, out, over_training, replace, spec)
            return
        try:
            runs = find_runs(path)
        except FileNotFoundError as e:
            raise typer.BadParameter(str(e)) from None
        check_arguments(runs, spec)
        if runs != [path]:  # a sweep or study: no report reads it while its runs change (intervene_run locks each)
            ctx.with_resource(DirLock(path, "sweep directory"))
        if over_training:
            if VERDICT_ROLE not in spec.corrupt:
                raise typer.BadParameter(f"the readouts over training are verdicts, read under {VERDICT_ROLE} corruption",
                                         param_hint="--corrupt")
            _over_training(path, runs, VERDICT_ROLE, spec.n, spec.seed)
            return
        names = {r: str(r.relative_to(path)) if r != path else r.name for r in runs}
        outs = {r: r if out is None else out / (names[r] if r != path else "") for r in runs}
        check_kinds(outs, spec, replace)
        labelled = spec.labelled
        title = (f"mechanism: corrupt {VERDICT_ROLE}, examples outside the conv reach (see detail)" if labelled
                 else f"attributions at the read point: corrupt {spec.corrupt[0]}, {spec.direction} (verdicts are read "
                      f"under sufficient key corruption only)")
        table = verdict_table(title)
        failed = []
        for run_dir in tqdm(runs, desc="intervene", unit="run", disable=len(runs) == 1):
            name = names[run_dir]
            try:
                df, v = intervene_run(run_dir, spec, out=outs[run_dir], replace=replace)
            except Exception as e:  # one bad run is reported and skipped
                failed.append(name)
                tqdm.write(f"skipped {name}: {describe(e)}", file=sys.stderr)
                table.add_row(name, "FAILED", "", "", "", "", "", "")
                continue
            print_verification(name, df)
            if v is not None:
                table.add_row(*verdict_row(name, v))
            elif labelled or spec.direction != "sufficiency":
                table.add_row(name, "-", "", "", "", "", "", "nothing to read" if labelled else f"{spec.direction}: no label")
            else:
                a = read_point_attributions(df, spec.corrupt[0])
                table.add_row(name, "-", f"{a['effect']:.3f}", str(a["layer"]),
                              *(f"{a[r]:.2f}" for r in ("key", "value", "query")), f"corrupt {spec.corrupt[0]}: no label")
        Console().print(table)
        if failed:
            typer.echo(f"error: {len(failed)} of {len(runs)} runs failed: {', '.join(failed)}", err=True)
            raise typer.Exit(1)


FLAGS = {"corrupt": "--corrupt", "n": "--n", "sites": "--sites", "positions": "--positions", "seed": "--seed",
         "split": "--split", "direction": "--direction", "analyses": "--analysis", "method": "--method",
         "gradient": "--verify"}  # the flag of each `ReadoutSpec` field


def readout_spec(verify: int, **fields):
    """The `ReadoutSpec` of the flags (`--verify` among the gradient options); a BadParameter naming the flag at
    fault (`--verify` without `--method gradient`: it checks the gradient estimate)."""
    from mecheval.commands.flags import in_flags
    from mecheval.interventions.spec import GradientOptions, ReadoutSpec, ReadoutSpecError

    try:
        return ReadoutSpec(**fields, gradient=GradientOptions(verify=verify) if verify else None)
    except ReadoutSpecError as e:
        raise typer.BadParameter(in_flags(e, {"`method='gradient'`": "--method gradient"}),
                                 param_hint=FLAGS.get(e.field)) from None


def verdict_table(title: str):
    """The table `intervene` prints: a row per run (`add_row`)."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("run", overflow="fold")
    table.add_column("verdict", min_width=len("direct retrieval"))
    for col in ("effect", "layer", "@key", "@value", "@query"):
        table.add_column(col, no_wrap=True)
    table.add_column("detail", overflow="fold")
    return table


def verdict_row(name: str, v) -> list[str]:
    """A verdict's row of `verdict_table`, its attributions `–` where the model did not learn (noise; the
    reports' rule, `shows_attributions`)."""
    from mecheval.interventions.verdict import shows_attributions

    shown = shows_attributions(v.label)
    return [name, v.label, f"{v.effect:.3f}", str(v.layer),
            *(f"{x:.2f}" if shown else "–" for x in (v.attrib_key, v.attrib_value, v.attrib_query)), v.detail]


def _hf(hf: str, hf_tokens: str, hf_pairs: int, out: Path | None, over_training: bool, replace: bool, spec) -> None:
    """`intervene --hf`: AR in a transformers model's own vocabulary (`mecheval.hf.ar`), read as `spec` asks,
    written to `out` (earlier readouts there of another kind or other examples kept unless `replace`:
    `check_kinds`)."""
    from rich.console import Console

    from mecheval.commands.flags import in_flags
    from mecheval.hf.ar import RULES, intervene_hf, load, wrap_for_ar
    from mecheval.training.lock import LockedError

    if hf_tokens not in RULES:
        raise typer.BadParameter(f"must be one of {list(RULES)}, got {hf_tokens!r}", param_hint="--hf-tokens")
    if over_training:
        raise typer.BadParameter("a transformers model has no snapshots", param_hint="--over-training")
    try:
        model, tokenizer = load(hf)
        lm, task = wrap_for_ar(model, tokenizer, hf_tokens, hf_pairs, spec.seed)
    except ValueError as e:
        flags = {"`rule='random'`": "--hf-tokens random", "`pairs`": "--hf-pairs"}
        raise typer.BadParameter(in_flags(e, flags), param_hint="--hf") from None
    out = out or Path(f"intervene-{Path(hf).name}")
    check_kinds({out: out}, spec, replace)
    try:
        df, v = intervene_hf(lm, task, hf, out, spec, rule=hf_tokens)
    except LockedError as e:
        raise typer.BadParameter(str(e), param_hint="--out") from None
    print_verification(str(out), df)
    table = verdict_table(f"mechanism: corrupt {spec.corrupt[0]}, examples outside the conv reach (see detail)")
    if v is None:
        table.add_row(str(out), "-", "", "", "", "", "", "")
    else:
        table.add_row(*verdict_row(str(out), v))
    Console().print(table)


def check_kinds(outs: dict[Path, Path], spec, replace: bool) -> None:
    """Before any run is touched: no run's readouts are written over by another kind, or by a reading of other
    examples (`check_replace`: --n, --seed, --split)."""
    from mecheval.commands.flags import in_flags
    from mecheval.interventions.runs import ReadoutKindError, check_replace

    if replace:
        return
    for out_dir in outs.values():
        try:
            check_replace(out_dir, spec)
        except ReadoutKindError as e:
            flags = {"`out=DIR`": "--out DIR", "`replace=True`": "--replace", "`n`": "--n", "`seed`": "--seed",
                     "`split`": "--split"}
            raise typer.BadParameter(in_flags(e, flags), param_hint="--out / --replace") from None


def print_verification(name: str, df) -> None:
    """One line per corrupted role and subset of a table with verified cells (`--verify`): how many cells
    were patched exactly, the largest error of the estimate among them, and the recall bound
    (`patching.verification`)."""
    from tqdm import tqdm

    from mecheval.interventions.patching import verification

    for r in verification(df).itertuples() if "verified" in df else ():
        tqdm.write(f"{name}: corrupt {r.corrupt}, {r.subset}: {r.verified} of {r.cells} cells patched exactly, "
                   f"largest error of the estimate {r.max_error:.3f}, recall of the exact top {r.verified} >= {r.recall_lb:.2f}")


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


def check_arguments(runs: list[Path], spec) -> None:
    """The spec's --split, --corrupt and --positions against the first readable run's task; each --sites pattern
    must name a site of at least one run's model. A BadParameter names the option at fault."""
    import json

    import torch

    from mecheval.interventions.positions import check as check_positions
    from mecheval.interventions.readout import present_sites
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
    if spec.split not in task.splits:
        raise typer.BadParameter(f"{spec.split!r} is not a split of {task.name}: {', '.join(task.splits)}", param_hint="--split")
    batch = task.sample(2, seed=0, split=spec.split)
    for role in spec.corrupt:
        try:
            task.corrupt(batch, role, 0)
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="--corrupt") from None
    try:
        check_positions(list(spec.positions or ()), list(batch.roles), task.name)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--positions") from None
    names = set()
    for cfg in configs.values():
        with torch.device("meta"):
            names |= set(build_model(cfg.model).sites())
    missing = [p for p in spec.sites if not present_sites(sorted(names), [p])]
    if missing:
        raise typer.BadParameter(f"{missing} match no site of these models; e.g. {sorted(names)[:4]}", param_hint="--sites")
