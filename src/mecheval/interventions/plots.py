"""Layer × position heatmaps of an interchange table (matplotlib, written to PNG)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def attrib_grid(df: pd.DataFrame, site: str, value: str = "attrib") -> pd.DataFrame:
    """layer (rows) × position (columns, in table order; numeric positions sorted) of `value` at `site`."""
    rows = df[df["site"] == site]
    cols = list(dict.fromkeys(rows["position"]))
    if all(c.isdigit() for c in cols):
        cols = sorted(cols, key=int)
    return rows.pivot_table(index="layer", columns="position", values=value, aggfunc="mean")[cols].sort_index()


def heatmap(df: pd.DataFrame, site: str, path: str | Path, title: str = "") -> Path:
    """Writes the attribution heatmap of `site` (colour range 0..1, values annotated) to `path`."""
    grid = attrib_grid(df, site)
    fig, ax = plt.subplots(figsize=(1.0 + 0.6 * grid.shape[1], 1.0 + 0.5 * grid.shape[0]), layout="constrained")
    im = ax.imshow(grid.to_numpy(), vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set_xticks(range(grid.shape[1]), grid.columns)
    ax.set_yticks(range(grid.shape[0]), grid.index)
    ax.set_xlabel("position")
    ax.set_ylabel("layer")
    ax.set_title(title or site, fontsize=9)
    if grid.size <= 200:
        for (i, j), v in pd.DataFrame(grid.to_numpy()).stack().items():
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="w" if v < 0.5 else "k")
    fig.colorbar(im, ax=ax, label="attrib")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
