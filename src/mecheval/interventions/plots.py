"""Layer × position heatmaps of an interchange table (matplotlib, written to PNG)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


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
    return _save(fig, path)


ROLE_ORDER = ("key", "value", "sep", "query")


def layer_profile(df: pd.DataFrame, path: str | Path, title: str = "") -> Path:
    """Attribution per role at every block boundary (embedding, after layer 0, …, output), with the
    bootstrap interval as a band: `resid_pre` of layer i is boundary i, `resid_post` of the last is L."""
    rows = df[df["site"].isin(["resid_pre", "resid_post"])].copy()
    rows["boundary"] = rows["layer"] + (rows["site"] == "resid_post")
    rows = rows.drop_duplicates(["boundary", "position"])
    n_layers = int(rows["boundary"].max())
    fig, ax = plt.subplots(figsize=(4.2, 3.0), layout="constrained")
    roles = [r for r in ROLE_ORDER if r in set(rows["position"])] + sorted(set(rows["position"]) - set(ROLE_ORDER))
    for role in roles:
        r = rows[rows["position"] == role].sort_values("boundary")
        ax.plot(r["boundary"], r["attrib"], marker="o", label=role)
        if "attrib_lo" in r:
            ax.fill_between(r["boundary"], r["attrib_lo"], r["attrib_hi"], alpha=0.2)
    ax.set_xticks(range(n_layers + 1), ["embed", *(f"after {i}" for i in range(n_layers - 1)), "output"])
    ax.axhline(0, color="0.7", lw=0.8)
    ax.axhline(1, color="0.7", lw=0.8, ls="--")
    ax.set_ylabel("attrib (clean residual patched in)")
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=7, frameon=False)
    return _save(fig, path)


def conv_window_heatmap(window: pd.DataFrame, path: str | Path, title: str = "") -> Path:
    """One panel per direction: rows (layer, site), columns offset from the queried key (and `joint`)."""
    directions = list(dict.fromkeys(window["direction"]))
    fig, axes = plt.subplots(1, len(directions), figsize=(3.6 * len(directions), 0.6 + 0.45 * window.groupby(["layer", "site"]).ngroups),
                             layout="constrained", squeeze=False)
    for ax, direction in zip(axes[0], directions):
        part = window[window["direction"] == direction].copy()
        part["row"] = "L" + part["layer"].astype(str) + " " + part["site"]
        part["col"] = part["offset"].map(lambda o: "joint" if o < 0 else f"key+{o}")
        grid = part.pivot_table(index="row", columns="col", values="attrib", aggfunc="mean")
        grid = grid[sorted(grid.columns, key=lambda c: (c == "joint", c))]
        ax.imshow(grid.to_numpy(), vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_xticks(range(grid.shape[1]), grid.columns, fontsize=7)
        ax.set_yticks(range(grid.shape[0]), grid.index, fontsize=7)
        ax.set_title(f"{direction}", fontsize=8)
        for (i, j), v in pd.DataFrame(grid.to_numpy()).stack().items():
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6, color="w" if v < 0.5 else "k")
    fig.suptitle(title, fontsize=8)
    return _save(fig, path)


def state_curve_plot(curve: pd.DataFrame, path: str | Path, title: str = "") -> Path:
    """`state_readout.state_curve` as two panels (offset from the key; from the answer): attribution per
    layer with its interval, sufficiency solid, necessity dashed."""
    fig, axes = plt.subplots(1, 2, figsize=(7.6, 3.0), layout="constrained", sharey=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (align, label) in zip(axes, [("key", "state after key + offset"), ("answer", "state after answer + offset")]):
        for layer, part in curve[curve["align"] == align].groupby("layer"):
            for direction, style in (("sufficiency", "-"), ("necessity", "--")):
                r = part[part["direction"] == direction].sort_values("offset")
                if r.empty:
                    continue
                c = colours[int(layer) % len(colours)]
                ax.plot(r["offset"], r["attrib"], style, marker="o", ms=3, color=c, label=f"layer {layer}, {direction}")
                ax.fill_between(r["offset"], r["attrib_lo"], r["attrib_hi"], color=c, alpha=0.15)
        ax.axhline(0, color="0.7", lw=0.8)
        ax.axhline(1, color="0.7", lw=0.8, ls="--")
        ax.set_xlabel(label)
    axes[0].set_ylabel("attrib (state patched)")
    axes[1].legend(fontsize=6, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.suptitle(title, fontsize=8)
    return _save(fig, path)
