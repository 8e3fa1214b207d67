"""Plots of interchange tables, as a library: each function draws on a matplotlib Axes (or Figure) it is
given, or on a new one, and returns it; with `path` it also writes a PNG (and closes a figure it made).
Nothing sets the backend: in a notebook the figures show inline.

    heatmap(df, site, ax=ax)          layer × position attributions at one site, for one subset
    layer_profile(df, ax=ax)          attribution per role at every block boundary, with intervals
    conv_window_heatmap(window)       the conv-window table (a Figure: one panel per direction)
    state_curve_plot(curve)           the state readout (a Figure: two panels)
A table with several artefact subsets (`interchange`'s default) is shown for one, `outside` where present,
and the title says which and how many examples.
"""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from mecheval.common import atomic_write_bytes


TEXT_PT = 9  # the smallest text of a heatmap: 15 px at the 120 dpi it is saved at

def _figure(ax: Axes | None, path, size: tuple[float, float]) -> tuple[Figure, Axes]:
    """The Axes to draw on: `ax`; else a new pyplot figure (shown in notebooks), or, when only written to
    `path`, a Figure outside pyplot (no backend, nothing to close)."""
    if ax is not None:
        return ax.figure, ax
    if path is None:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=size, layout="constrained")
        return fig, ax
    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.add_subplot()


def save(fig: Figure, path: str | Path, dpi: int = 120) -> Path:
    """Writes `fig` to `path` as a PNG (folders made), whole (`common.atomic_write_bytes`; never through a link)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    atomic_write_bytes(path, buf.getvalue())
    return path


def one_subset(df: pd.DataFrame, subset: str | None = None) -> tuple[pd.DataFrame, str]:
    """The rows of one artefact subset (default `outside` where the table has it, else `all`) and a caption
    naming it and its examples; tables without `subset` are returned whole."""
    if "subset" not in df:
        return df, f"n = {int(df['n'].iloc[0])}" if "n" in df and len(df) else ""
    subset = subset or ("outside" if (df["subset"] == "outside").any() else "all")
    rows = df[df["subset"] == subset]
    if rows.empty:
        raise ValueError(f"no rows of subset {subset!r}; the table has {sorted(set(df['subset']))}")
    return rows, f"{subset}, n = {int(rows['n'].iloc[0])}" if "n" in rows else subset


def attrib_grid(df: pd.DataFrame, site: str, value: str = "attrib", subset: str | None = None) -> pd.DataFrame:
    """layer (rows) × position (columns, in table order; integer positions sorted) of `value` at `site`, for
    one subset (`one_subset`). ValueError where a cell still has several rows (several corrupted roles,
    directions or methods: filter the table first)."""
    rows = one_subset(df, subset)[0]
    rows = rows[rows["site"] == site]
    if rows.duplicated(["layer", "position"]).any():
        raise ValueError(f"several rows per (layer, position) at {site!r}: select one corrupt/direction/method first")
    cols = list(dict.fromkeys(rows["position"]))
    if all(isinstance(c, int) or str(c).isdigit() for c in cols):
        cols = sorted(cols, key=int)
    # unstack, not pivot_table: a position whose cells are all NaN (no effect to attribute) keeps its column
    return rows.set_index(["layer", "position"])[value].unstack("position").reindex(columns=cols).sort_index()


def heatmap(df: pd.DataFrame, site: str, path: str | Path | None = None, title: str = "", *,
            ax: Axes | None = None, subset: str | None = None) -> Axes:
    """The attribution heatmap of `site` (layers × positions, colour range 0..1, values annotated) on `ax`
    (or a new figure); one subset, named in the title. Writes a PNG to `path` where given. In a gradient
    table, cells patched exactly (`verified`) are marked with a ✓, the others are estimates."""
    grid = attrib_grid(df, site, subset=subset)
    caption = one_subset(df, subset)[1]
    verified = df["verified"].astype(float).fillna(0) if "verified" in df and df["verified"].notna().any() else None
    checked = grid * 0 if verified is None else attrib_grid(df.assign(v=verified), site, "v", subset=subset)
    fig, ax = _figure(ax, path, (1.6 + 0.95 * grid.shape[1], 1.6 + 0.55 * grid.shape[0]))
    im = ax.imshow(grid.to_numpy(), vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set_xticks(range(grid.shape[1]), [str(c) for c in grid.columns], rotation=30, ha="right", fontsize=TEXT_PT)
    ax.set_yticks(range(grid.shape[0]), grid.index, fontsize=TEXT_PT)
    ax.set_xlabel("position")
    ax.set_ylabel("layer")
    estimated = verified is not None and (checked.to_numpy() == 0).any()
    ax.set_title((title or f"{site} ({caption})") + ("\n(estimates; ✓ patched exactly)" if estimated else ""), fontsize=9)
    if grid.size <= 200:
        for (i, j), v in pd.DataFrame(grid.to_numpy()).stack().items():
            mark = " ✓" if checked.iat[i, j] > 0 else ""
            ax.text(j, i, f"{v:.2f}{mark}", ha="center", va="center", fontsize=TEXT_PT, color="w" if v < 0.5 else "k")
    fig.colorbar(im, ax=ax, label="attrib")
    if path is not None:
        save(fig, path)
    return ax


ROLE_ORDER = ("key", "value", "sep", "query")


def layer_profile(df: pd.DataFrame, path: str | Path | None = None, title: str = "", *,
                  ax: Axes | None = None, subset: str | None = None) -> Axes:
    """Attribution per role at every block boundary (embedding, after layer 0, …, output), with the
    bootstrap interval as a band: `resid_pre` of layer i is boundary i, `resid_post` of the last is L.
    One subset (named in the title); on `ax` or a new figure; a PNG to `path` where given."""
    rows, caption = one_subset(df, subset)
    rows = rows[rows["site"].isin(["resid_pre", "resid_post"])].copy()
    rows["boundary"] = rows["layer"] + (rows["site"] == "resid_post")
    rows = rows.drop_duplicates(["boundary", "position"])
    n_layers = int(rows["boundary"].max())
    fig, ax = _figure(ax, path, (4.2, 3.0))
    positions = list(dict.fromkeys(rows["position"]))
    roles = [r for r in ROLE_ORDER if r in positions] + [p for p in positions if p not in ROLE_ORDER]
    for role in roles:
        r = rows[rows["position"] == role].sort_values("boundary")
        ax.plot(r["boundary"], r["attrib"], marker="o", label=str(role))
        if "attrib_lo" in r:
            ax.fill_between(r["boundary"], r["attrib_lo"], r["attrib_hi"], alpha=0.2)
    ax.set_xticks(range(n_layers + 1), ["embed", *(f"after {i}" for i in range(n_layers - 1)), "output"])
    ax.axhline(0, color="0.7", lw=0.8)
    ax.axhline(1, color="0.7", lw=0.8, ls="--")
    ax.set_ylabel("attrib (clean residual patched in)")
    ax.set_title(title or caption, fontsize=8)
    ax.legend(fontsize=7, frameon=False)
    if path is not None:
        save(fig, path)
    return ax


def conv_window_heatmap(window: pd.DataFrame, path: str | Path | None = None, title: str = "", *,
                        fig: Figure | None = None) -> Figure:
    """One panel per direction: rows (layer, site), columns offset from the queried key (and `joint`);
    on `fig` (or a new one), written to `path` where given."""
    directions = list(dict.fromkeys(window["direction"]))
    n_cols = window["offset"].nunique()
    size = ((1.8 + 0.8 * n_cols) * len(directions), 1.4 + 0.5 * window.groupby(["layer", "site"]).ngroups)
    fig = fig if fig is not None else _figure(None, path, size)[0]
    fig.clear()
    axes = fig.subplots(1, len(directions), squeeze=False)
    for ax, direction in zip(axes[0], directions):
        part = window[window["direction"] == direction].copy()
        part["row"] = "L" + part["layer"].astype(str) + " " + part["site"]
        part["col"] = part["offset"].map(lambda o: "joint" if o < 0 else f"key+{o}")
        grid = part.pivot_table(index="row", columns="col", values="attrib", aggfunc="mean")
        grid = grid[sorted(grid.columns, key=lambda c: (c == "joint", c))]
        ax.imshow(grid.to_numpy(), vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_xticks(range(grid.shape[1]), grid.columns, rotation=30, ha="right", fontsize=TEXT_PT)
        ax.set_yticks(range(grid.shape[0]), grid.index, fontsize=TEXT_PT)
        ax.set_title(f"{direction}", fontsize=TEXT_PT)
        for (i, j), v in pd.DataFrame(grid.to_numpy()).stack().items():
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=TEXT_PT, color="w" if v < 0.5 else "k")
    fig.suptitle(title, fontsize=TEXT_PT)
    if path is not None:
        save(fig, path)
    return fig


def state_curve_plot(curve: pd.DataFrame, path: str | Path | None = None, title: str = "", *,
                     fig: Figure | None = None) -> Figure:
    """`state_readout.state_curve` as two panels (offset from the key; from the answer): attribution per
    layer with its interval, sufficiency solid, necessity dashed; on `fig` (or a new one), to `path` where given."""
    import matplotlib

    fig = fig if fig is not None else _figure(None, path, (7.6, 3.0))[0]
    fig.clear()
    axes = fig.subplots(1, 2, sharey=True)
    colours = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
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
    if path is not None:
        save(fig, path)
    return fig
