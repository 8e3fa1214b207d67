"""`mecheval relabel STUDY_DIR`: the study's verdicts decided anew by the current rules, its report rebuilt."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mecheval.commands.options import example, split_list


def register(app: typer.Typer) -> None:
    @app.command(epilog=example("mecheval relabel results/cpu/quick", "mecheval relabel results/paper-d64/atr-twist --recheck",
                                "mecheval relabel results/cpu/modern-rwkv7 --repatch --keep state,conv-window",
                                "mecheval relabel results/cpu/modern-atr-mamba3 --terms",
                                "mecheval relabel results/cpu/attention-pairs"))
    def relabel(
        path: Annotated[Path, typer.Argument(help="A study directory (with study.json), or a run directory or a folder of runs.", exists=True, file_okay=False)],
        repatch: Annotated[bool, typer.Option("--repatch", help="Run every run's interventions again with the current code and the study's settings (loads the weights, trains nothing; seconds per run).")] = False,
        recheck: Annotated[bool, typer.Option("--recheck", help="Load the weights for the controls the tables lack (the pointer control; which test prompts were seen in training), patching again only the runs whose readouts read seen prompts.")] = False,
        keep: Annotated[list[str], typer.Option(help="With --repatch: the study's analyses whose files are left as they were (the state readout takes minutes per run), e.g. state,conv-window: to add a new analysis to a study's runs.")] = [],
        terms: Annotated[bool, typer.Option("--terms", help="Compute only the term analyses' tables again (two-token, rotary, reflection, all-terms: no verdict reads them) on each run's own readout examples, the rest left as it is (seconds per run).")] = False,
    ) -> None:
        """Re-decide every run's verdict.json from its committed tables (no training, no patching; with
        --repatch, from tables patched anew) and rebuild the report; prints the summary table. Runs without a per-example table (examples.parquet)
        get one from a forward pass on the study's examples, for like-for-like comparisons. Outside a study (a run,
        or a folder of runs such as a sweep's): each readout decided anew from its tables, one line per readout."""
        from mecheval.interventions.runs import relabel_runs
        from mecheval.interventions.spec import ANALYSES
        from mecheval.report.terminal import print_summary
        from mecheval.study.run import relabel_study

        keep = split_list(keep)
        unknown = sorted(set(keep) - set(ANALYSES))
        if unknown or (keep and not repatch) or (terms and (repatch or recheck)):
            why = (f"unknown analyses {unknown} (known: {', '.join(ANALYSES)})" if unknown else
                   "--terms goes alone (it patches nothing)" if terms else "--keep goes with --repatch")
            typer.echo(f"error: {why}", err=True)
            raise typer.Exit(2)
        if (path / "study.json").exists():
            print_summary(relabel_study(path, repatch, recheck, keep=tuple(keep), terms=terms))
            return
        if repatch or recheck or terms:
            typer.echo(f"error: {path} has no study.json: --repatch, --recheck and --terms read a study's readout "
                       "settings", err=True)
            raise typer.Exit(2)
        try:
            relabelled = relabel_runs(path)
        except FileNotFoundError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
        for readouts, before, now in relabelled:
            typer.echo(f"{readouts}: {now}" + ("" if before == now else f" (was {before})"))
        if not relabelled:
            typer.echo(f"{path}: no run with an interventions table to relabel")
