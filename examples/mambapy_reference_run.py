"""Issue 18's reference run: our Mamba LM beside the same LM built on mambapy's blocks (alxndrTL/mamba.py,
which follows mamba_ssm's `Mamba`), trained side by side from the same weights on the same batches.

Both models share the embedding, the final norm and the tied head; only the blocks differ (ours:
`mecheval.models.mixers.mamba` on the fused CPU kernels; theirs: mambapy's `ResidualBlock`, RMSNorm eps
1e-5 as mamba_ssm, its parallel scan in pure PyTorch), with every block weight copied from ours. Each
step trains both on one batch of the config's training stream with the config's AdamW and schedule.
Writes OUT/trajectory.csv (step, loss and test accuracy of each) at every evaluation and prints where
they part.

    python examples/mambapy_reference_run.py results/paper-d64/mamba-published/published.yaml \
        --steps 3000 --out results/paper-d64/mamba-published/mambapy-reference
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F
import typer
import yaml
from mambapy.mamba import MambaConfig, ResidualBlock
from torch import nn

from mecheval.common import atomic_write_text
from mecheval.models import build_model
from mecheval.tasks import make_task
from mecheval.training import validate_config
from mecheval.training.data import TrainStream, eval_sets
from mecheval.training.schedule import lr_at
from mecheval.training.trainer import evaluate


class MambapyBlock(nn.Module):
    """mambapy's pre-norm residual block with our Block's `mix` / `finish` split (what `LM.forward_from` calls)."""

    def __init__(self, block: ResidualBlock) -> None:
        super().__init__()
        self.block = block

    def mix(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, self.block.mixer(self.block.norm(x))

    def finish(self, x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return x + m


@torch.no_grad()
def with_mambapy_blocks(lm: nn.Module) -> nn.Module:
    """A copy of `lm` (an all-Mamba LM with short convs) whose blocks are mambapy's, with our weights (a zero
    conv bias where ours has none: mambapy's conv always has one)."""
    ref = copy.deepcopy(lm)
    first = lm.layers[0].mixer
    cfg = MambaConfig(d_model=lm.cfg.d_model, n_layers=len(lm.layers), d_state=first.d_state, dt_rank=first.dt_rank,
                      expand_factor=first.d_inner // lm.cfg.d_model, d_conv=first.conv.kernel_size)
    blocks = []
    for ours in lm.layers:
        theirs, m = ResidualBlock(cfg), ours.mixer
        for name in ("in_proj", "x_proj", "dt_proj", "out_proj"):
            getattr(theirs.mixer, name).load_state_dict(getattr(m, name).state_dict())
        theirs.mixer.conv1d.weight.copy_(m.conv.weight)
        theirs.mixer.conv1d.bias.copy_(torch.zeros_like(theirs.mixer.conv1d.bias) if m.conv_bias is None else m.conv_bias)
        theirs.mixer.A_log.copy_(m.A_log)
        theirs.mixer.D.copy_(m.D)
        theirs.norm.weight.copy_(ours.norm1.weight)
        blocks.append(MambapyBlock(theirs))
    ref.layers = nn.ModuleList(blocks)
    return ref


def main(config: Path, out: Path = typer.Option(...), steps: int = 3000, eval_every: int = 250) -> None:
    cfg = validate_config(yaml.safe_load(config.read_text()))
    if cfg.model.preset != "mamba" or not cfg.model.options.get("mamba", {}).get("conv_bias"):
        raise typer.BadParameter("needs an all-Mamba config with options.mamba.conv_bias: true (mambapy's conv has a bias)")
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    ours = build_model(cfg.model)
    models = {"ours": ours, "mambapy": with_mambapy_blocks(ours)}
    o = cfg.optim
    opts = {k: torch.optim.AdamW(m.parameters(), lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay)
            for k, m in models.items()}
    task = make_task(cfg.task.name, **cfg.task.params)
    stream = TrainStream(task, cfg.batch_size, cfg.seed, cfg.train_size, cfg.train_order)
    test = eval_sets(task, ["test"], cfg.eval.size, cfg.eval.seed)["test"]
    rows, seconds = [], dict.fromkeys(models, 0.0)
    for step in range(steps):
        batch, row = stream.batch(step), {"step": step + 1}
        for name, lm in models.items():
            start = time.process_time()
            lm.train()
            for group in opts[name].param_groups:
                group["lr"] = lr_at(step, cfg.steps, o)
            loss = F.cross_entropy(lm(batch.tokens, positions=batch.answer_pos), batch.answer)
            opts[name].zero_grad(set_to_none=True)
            loss.backward()
            opts[name].step()
            seconds[name] += time.process_time() - start
            row[f"loss_{name}"] = loss.item()
            if (step + 1) % eval_every == 0:
                row[f"test_acc_{name}"] = evaluate(lm, test, cfg.eval.batch_size, False)["acc"]
        rows.append(row)
        if (step + 1) % eval_every == 0 or step + 1 == steps:  # written as it goes: a killed run keeps its steps
            print({k: round(v, 4) for k, v in row.items()}, flush=True)
            atomic_write_text(out / "trajectory.csv", pd.DataFrame(rows).to_csv(index=False))
    df = pd.DataFrame(rows)
    gap = (df["loss_ours"] - df["loss_mambapy"]).abs()
    print(f"{steps} steps of {cfg.steps} (the schedule's); CPU s/step ours {seconds['ours'] / steps:.3f}, "
          f"mambapy {seconds['mambapy'] / steps:.3f}; |loss gap| max {gap.max():.2e}, "
          f"first step over 1e-3: {int(df['step'][gap > 1e-3].min()) if (gap > 1e-3).any() else 'none'}")


if __name__ == "__main__":
    typer.run(main)
