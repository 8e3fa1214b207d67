"""`mecheval study PRESET --out DIR [--scale cpu|paper] [--executor local|ray]`: a whole study."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from mecheval.commands.options import cohort_option, cohort_size, example, split_list, tracker_option, trackers
from mecheval.common import MAX_N_EXAMPLES


def register(app: typer.Typer) -> None:
    from mecheval.common import N_EXAMPLES

    @app.command(epilog=example(
        "mecheval study quick --out results/quick",
        "mecheval study ar-architectures --seeds 0,1,2 --archs attention,mamba --out results/ar",
        "mecheval study ar-architectures --seeds 0,1,2 --cohort auto --out results/ar",
        "mecheval study ar-architectures --archs mypkg.mod:MyMixer --out results/mine",
        "mecheval study atr-mamba-noconv --scale paper --widths 64 --archs attention,mamba --grammar-draw published --out results/atr-published",
        "mecheval study atr --scale paper --widths 64 --lrs 1e-3 --grammars easy --archs attention --build study --out results/atr-study-build",
        "mecheval study --list",
    ))
    def study(
        preset: Annotated[str, typer.Argument(help="A named study; `mecheval study --list` shows them.")] = "",
        out: Annotated[Optional[Path], typer.Option("--out", help="Study directory (resumed if it exists). Required (except with --list).")] = None,
        scale: Annotated[Literal["cpu", "paper"], typer.Option(help="cpu (minutes on a laptop) or paper (the published sizes).")] = "cpu",
        executor: Annotated[Literal["local", "ray"], typer.Option(help="Where runs train.")] = "local",
        workers: Annotated[Optional[int], typer.Option(help="Local worker processes (default: the core count).")] = None,
        address: Annotated[Optional[str], typer.Option(help="Ray cluster address (default: start or find one).")] = None,
        n: Annotated[int, typer.Option(min=1, max=MAX_N_EXAMPLES, help="Examples per intervention experiment (the API's N_EXAMPLES, as `mecheval intervene`).")] = N_EXAMPLES,
        widths: Annotated[Optional[list[str]], typer.Option(help="Widths to train, e.g. 64 or 32,64 (default: the scale's).")] = None,
        lrs: Annotated[Optional[list[str]], typer.Option(help="Learning rates, e.g. 3e-4,1e-3 (default: the scale's).")] = None,
        seeds: Annotated[Optional[list[str]], typer.Option(help="Seeds, e.g. 0,1,2 (default: the study's cpu_seeds at the cpu scale, e.g. 0,1,2 for quick; else seed 0 only).")] = None,
        archs: Annotated[Optional[list[str]], typer.Option(help="Architectures to keep, by label, e.g. 'attention,mamba (d_conv 0)'; a mixer's import path (mypkg.mod:MyMixer) adds it.")] = None,
        new: Annotated[bool, typer.Option("--new", help="Restart afresh the runs in --out made with a different spec (else refused).")] = False,
        early_stop: Annotated[bool, typer.Option("--early-stop", help="End a run at test accuracy >= 0.99 at two evaluations in a row.")] = False,
        grammars: Annotated[Optional[list[str]], typer.Option(help="ATR studies: the grammars to train, e.g. easy (default: the scale's).")] = None,
        grammar_draw: Annotated[Optional[Literal["mecheval", "published", "published-sets", "published-split", "published-split-sets"]], typer.Option("--grammar-draw", help="ATR easy studies: the grammar (ATRParams.grammar_draw): ours from its seed (mecheval, default), the published easy grammar itself (published: documents drawn by our sampler), or, at the paper scale, also the published training set as the fixed set (published-sets); published-split and published-split-sets: the same for the published generalisation language, its grammar and held-out pairs (atr-generalisation).")] = None,
        build: Annotated[Optional[Literal["mecheval", "study"]], typer.Option("--build", help="Every model's build (ModelConfig.build): study, the LM as the study's code builds it (Mamba, attention and Based: zoology's init, its biases and norms), or mecheval, ours (default: study for Mamba at the paper scale, else mecheval).")] = None,
        train_order: Annotated[Optional[Literal["replay", "shuffle"]], typer.Option("--train-order", help="paper scale: the fixed set in one order every epoch (replay, the study's; default) or a new one each epoch (shuffle).")] = None,
        list_: Annotated[bool, typer.Option("--list", help="List the studies and exit.")] = False,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
        tensorboard: Annotated[bool, tracker_option("tensorboard")] = False,
        wandb: Annotated[bool, tracker_option("wandb")] = False,
        cohort: Annotated[Optional[str], cohort_option()] = None,
    ) -> None:
        """Run a named study (sweep + interventions + report) and print its summary."""
        from rich.console import Console

        from mecheval.report.terminal import print_summary
        from mecheval.study import SCALES, STUDIES, run_study
        from mecheval.sweeps.runner import EXECUTORS
        from mecheval.training.loggers import require

        if list_:
            for s in STUDIES.values():
                typer.echo(f"{s.name:20s} {s.description}\n{'':20s} cpu scale: {s.cpu_drops}\n"
                           f"{'':20s} measured: {s.cpu_measured}")
            return
        if preset not in STUDIES:
            raise typer.BadParameter(f"unknown study {preset!r}; known: {', '.join(STUDIES)}", param_hint="PRESET")
        if scale not in SCALES:
            raise typer.BadParameter(f"must be one of {SCALES}", param_hint="--scale")
        if out is None:
            raise typer.BadParameter("required", param_hint="--out")
        if executor not in EXECUTORS:
            raise typer.BadParameter(f"must be one of {', '.join(EXECUTORS)}, got {executor!r}", param_hint="--executor")
        size = cohort_size(cohort)
        axes = {
            "widths": _numbers(widths, int, "--widths"), "lrs": _numbers(lrs, float, "--lrs"),
            "seeds": _numbers(seeds, int, "--seeds"),
            "archs": split_list(archs),
            "early_stop": early_stop, "train_order": train_order, "grammars": split_list(grammars),
            "grammar_draw": grammar_draw, "build": build,
            "trackers": trackers(tensorboard=tensorboard, wandb=wandb),
        }
        for tracker in axes["trackers"]:  # a missing package stops the study before any run starts
            try:
                require(tracker)
            except ImportError as e:
                raise typer.BadParameter(str(e), param_hint=f"--{tracker}") from None
        try:
            STUDIES[preset].sweep(scale, **axes)
        except ValueError as e:
            hint = next((f"--{k}" for k in ("train-order", "grammar-draw", "grammars", "build") if k.replace("-", "_") in str(e)), "--archs")
            raise typer.BadParameter(str(e), param_hint=hint) from None
        report = run_study(preset, out, scale, executor, workers, address, n_examples=n, quiet=quiet, new=new, cohort=size,
                           **axes)
        print_summary(report, Console())


def _numbers(texts: list[str] | None, kind: type, flag: str) -> list | None:
    """`["3e-4,1e-3"]` (or repeated) -> [0.0003, 0.001]; None stays None (the scale's default)."""
    if texts is None:
        return None
    try:
        values = [kind(v) for v in split_list(texts)]
    except ValueError:
        raise typer.BadParameter(f"expected {kind.__name__}s, comma-separated or repeated, got {texts!r}", param_hint=flag) from None
    if not values:
        raise typer.BadParameter("no values", param_hint=flag)
    return values
