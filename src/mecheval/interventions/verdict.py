"""How a model retrieves, read off an interchange table (the study's main readout), with the detail
that the published label hides.

Readout: corrupt the queried key; patch the clean residual stream at the key, value and query
positions (sufficiency direction) at the *read point*:
    n_layers >= 2   the input of the layer that brings the answer to the query: the last layer input
                    (`resid_pre` of layer 1 … L−1) where @query is still below `high`, else layer 1.
                    For 2 layers this is always the published layer 1; for 3 layers it is layer 2
                    unless the answer already sits at the query there (then layer 1: an inert last
                    layer does not hide an induction in layers 0–1)
    n_layers == 1   the short conv's output inside layer 0 (`conv_out`): the only point between the
                    embedding and the answer (the embedding itself would give @key = 1 by construction)
Rows of subset `outside` (examples whose queried pair the answer cannot reach through short convs
alone, `artefact.py`) are read where the table has them.
Every comparison below is decided by the 95% bootstrap interval of the quantity it compares, never by
its point estimate: "x >= t" holds where the interval lies at or above t, fails where it lies below, and
is undecided where it straddles t. A label holds where its comparisons all hold; `inconclusive` where the
data decide neither it nor its failure (the detail names the interval that straddles).
    not learned       effect = p_clean − p_corrupt <= min_effect (the study drops such runs:
                      0.01 on AR, 0.1 on ATR), or, where the accuracy on the examples read is given
                      (`Accuracy`), that accuracy not above the task's chance accuracy (one-sided binomial
                      test, 5%, as the findings' "near chance"): a model at chance gets no mechanism,
                      whatever a small effect's interval says
    induction         attrib@value >= high and attrib@query <= low: the association is stored at the
                      value position and read out by the last layer
    direct retrieval  attrib@value <= low and the key and query side >= high. The key and query side is
                      every position that can carry the key patched together (`carriers`: key, value, the
                      positions after the value inside the read layer's conv window, sep and query; the
                      full-window readout, `carriers.py`) where given; else the key and the query patched
                      together (position `key&query`) where the table has it (singles do not add up: a
                      key's information sits in more than one position); else the published sum
                      attrib@query + attrib@key, with the sum of the two intervals (a verdict the sum leaves
                      inconclusive or mixed names the rows it lacked in `detail`, and warns).
                      The study counts two readings under this label, which `detail` separates:
                        the query restores most  the answer is already at the query before the read point;
                        another position does    the layer after the read point combines key and value
                                        itself (for a conv mixer: inside its short conv window, named
                                        from the conv-window table where one is given)
                      (without the full-window readout: @query >= @key, or @key > @query).
                      Where the query restores most, the pointer control (`pointer.py`: the queried pair
                      moved, the clean query patched in) decides which of two things the query holds:
    positional pointer  where the value is, not the answer: most patched outputs follow the old position
                        (its interval at or above POINTER_SHARE). The answer followed the same way keeps
                        `direct retrieval`; neither decided: `inconclusive`. Without the control's table
                        the label stays and the detail says the control was not run.
With the full-window readout, `detail` also says how much of the effect the published three positions
explain jointly, how much every carrier does, and which positions beyond the three hold the rest.
    mixed             every label above decidedly fails
    inconclusive      neither a label nor the failure of every label is decided
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, field
from itertools import groupby

import pandas as pd

from mecheval.errors import MechevalError
from mecheval.intervals import above, all_of, at_most
from mecheval.interventions.carriers import CARRIERS, JOINTS, OTHERS, PUBLISHED, WINDOW
from mecheval.interventions.conv_window import best_cell
from mecheval.interventions.metrics import above_chance

NO_READ_POINT = "a 1-layer model without a short conv has no site between the embedding and the answer to read"
NOT_LEARNED = "not learned"
LABELS = ("induction", "direct retrieval", "mixed", NOT_LEARNED, "inconclusive", "positional pointer")
JOINT = "key&query"  # the joint key-and-query patch the direct-retrieval rule reads where present
SUM = "@key + @query"  # the published sum it reads without the joint patch (and without the full-window readout)
HIGH, LOW = 0.8, 0.2  # default attribution thresholds: "high" at or above HIGH, "low" below LOW
ROLES = ("key", "value", "query")
FORMED = 0.5  # a conv-window cell restoring at least this much is where the association is formed
POINTER_SHARE = 0.5  # the pointer control: most patched outputs follow the answer, or the old position


def shows_attributions(label) -> bool:
    """Whether a run's attributions are shown beside its verdict `label`: not for a model that did not learn
    (noise around an effect near 0; every table prints `–` there)."""
    return label != NOT_LEARNED


class NothingToRead(MechevalError, ValueError):
    """The model has no site between the embedding and the answer that the verdict could read."""


@dataclass(frozen=True)
class Verdict:
    label: str  # one of LABELS
    detail: str  # which reading of the label, and where, in words with the deciding numbers
    effect: float  # p_clean - p_corrupt
    layer: int  # the layer whose site was read
    site: str  # the site read (resid_pre, or conv_out for 1-layer models)
    subset: str  # the examples read: "outside" (the artefact control) or "all"
    n: int  # examples behind the numbers
    attrib_key: float
    attrib_value: float
    attrib_query: float
    interval_key: tuple[float, float] = (math.nan, math.nan)  # 95% bootstrap intervals
    interval_value: tuple[float, float] = (math.nan, math.nan)
    interval_query: tuple[float, float] = (math.nan, math.nan)
    interval_effect: tuple[float, float] = (math.nan, math.nan)
    attrib_joint: float = math.nan  # the key and query patched together (JOINT), where read
    interval_joint: tuple[float, float] = (math.nan, math.nan)
    # the full-window readout where read (`carriers.py`): cell -> (attrib, lo, hi)
    window: dict[str, tuple[float, float, float]] = field(default_factory=dict)

    def as_row(self) -> dict:
        row = {k: v for k, v in asdict(self).items() if not k.startswith(("attrib_", "interval_", "label", "window"))}
        row["verdict"] = self.label
        for role, name in (*((r, r) for r in ROLES), (JOINT, "joint")):
            row[f"attrib@{role}"] = getattr(self, f"attrib_{name}")
            row[f"attrib@{role}_lo"], row[f"attrib@{role}_hi"] = getattr(self, f"interval_{name}")
        for cell, (point, lo, hi) in self.window.items():
            row[f"window@{cell}"], row[f"window@{cell}_lo"], row[f"window@{cell}_hi"] = point, lo, hi
        row["effect_lo"], row["effect_hi"] = self.interval_effect
        return row


@dataclass(frozen=True)
class Accuracy:
    """The accuracy a verdict's `learned` test reads beside the effect: the readout's accuracy table
    (`accuracy.accuracy_table`: subset, acc, n per artefact subset) and the task's chance accuracy."""

    table: pd.DataFrame
    chance: float

    def above_chance(self, subset: str) -> tuple[bool | None, str]:
        """(True / False: the accuracy on `subset` is / is not significantly above chance; None where the table has
        no such subset or the chance accuracy is unknown (0 or NaN): nothing is decided), in words."""
        rows = self.table[self.table["subset"] == subset]
        if rows.empty:
            return None, ""
        acc, n = float(rows["acc"].iloc[0]), int(rows["n"].iloc[0])
        ci = (float(rows["acc_lo"].iloc[0]), float(rows["acc_hi"].iloc[0])) if "acc_lo" in rows else (acc, acc)
        return beats_chance(acc, n, self.chance), f"accuracy {_fmt(acc, ci)} (n = {n}) vs chance {self.chance:.2f}"


def beats_chance(acc: float, n: int, chance: float) -> bool | None:
    """Whether an accuracy `acc` over `n` examples is significantly above the chance accuracy (one-sided binomial
    test, 5%): the `learned` test's half that a model at chance fails; None where nothing is decided (n = 0, or the
    chance accuracy unknown: 0 or NaN)."""
    if n == 0 or not 0 < chance < 1:
        return None
    return above_chance(round(acc * n), n, chance)


def read_point(df: pd.DataFrame, high: float = HIGH) -> tuple[str, int]:
    """(site, layer) the verdict reads (module docstring) from the sufficiency rows of one corrupted
    role and subset; ValueError where the only candidate would be the embedding."""
    n_layers = int(df["n_layers"].iloc[0]) if "n_layers" in df else int(df["layer"].max()) + 1
    if n_layers == 1:
        if (df["site"] == "conv_out").any():
            return "conv_out", 0
        raise NothingToRead(NO_READ_POINT)
    query = df[(df["site"] == "resid_pre") & (df["position"] == "query")].set_index("layer")["attrib"]
    below = [i for i in range(1, n_layers) if i in query.index and query[i] < high]
    return "resid_pre", max(below, default=1)


def mechanism(
    df: pd.DataFrame,
    *,
    high: float = HIGH,
    low: float = LOW,
    min_effect: float = 0.01,
    corrupt: str = "key",
    site: str | None = None,
    layer: int | None = None,
    subset: str | None = None,
    conv_window: pd.DataFrame | None = None,
    carriers: pd.DataFrame | None = None,
    pointer: pd.DataFrame | None = None,
    accuracy: Accuracy | None = None,
) -> Verdict:
    """The verdict from an `interchange` table (see the module docstring for the rules).

    high/low: attribution thresholds; min_effect: the smallest p_clean − p_corrupt kept; corrupt: the
    corrupted role read (only "key": the rules are for key corruption); site/layer: override the read point (`read_point`); subset: the examples
    (default `outside` where present, else `all`); conv_window: a `conv_window` table, to name where a
    combining layer binds key and value; carriers: a `carriers.carriers_table` (the full-window readout;
    its rows at the read point are used); pointer: a `pointer.pointer_control` table (its row at the read
    point decides a direct retrieval at the query: module docstring); accuracy: the accuracy on the examples
    read and the chance accuracy (a model at chance on the subset read is `not learned`).
    """
    rows = df[df["corrupt"] == corrupt]
    if "direction" in rows:
        rows = rows[rows["direction"] == "sufficiency"]
    if rows.empty:
        raise ValueError(f"no sufficiency rows with corrupt={corrupt!r} in the table")
    if corrupt != "key":
        raise ValueError(f"the verdict's rules are for key corruption, not {corrupt!r}: read its attributions from the table")
    if "subset" in rows:
        subset = subset or ("outside" if (rows["subset"] == "outside").any() else "all")
        rows = rows[rows["subset"] == subset]
    else:
        subset = "all"
    try:
        default_site, default_layer = read_point(rows, high)
    except NothingToRead:  # no read point (1 layer, no conv): a model that did not learn is still read as such
        return _not_learned_without_read_point(rows, min_effect, subset, _chance_test(accuracy, subset))
    site = site or default_site
    layer = default_layer if layer is None else layer
    rows = rows[(rows["site"] == site) & (rows["layer"] == layer)].set_index("position")
    if rows.empty:
        raise ValueError(f"no rows for site {site!r} of layer {layer} (subset {subset!r}) in the table")
    at = {r: float(rows.at[r, "attrib"]) if r in rows.index else math.nan for r in (*ROLES, JOINT)}
    ci = {r: _interval(rows, r) for r in (*ROLES, JOINT)}
    effect, effect_ci = _effect(rows)
    where = f"{'the input of layer' if site == 'resid_pre' else site + ' of layer'} {layer}"
    window = _window(carriers, corrupt, subset, site, layer)
    if CARRIERS in window:
        side, side_ci, side_name = window[CARRIERS][0], window[CARRIERS][1:], f"@{CARRIERS}"
    elif JOINT in rows.index:
        side, side_ci, side_name = at[JOINT], ci[JOINT], f"@{JOINT}"
    else:
        side, side_ci, side_name = at["key"] + at["query"], _sum(ci["key"], ci["query"]), SUM
    tests = {  # name -> (decided: True / False / None, what it compares, with its interval)
        "learned": _above(effect_ci, min_effect, strict=True, what=f"effect {_fmt(effect, effect_ci)} vs {min_effect}"),
        "value high": _above(ci["value"], high, what=f"@value {_fmt(at['value'], ci['value'])} vs {high}"),
        "query low": _below(ci["query"], low, what=f"@query {_fmt(at['query'], ci['query'])} vs {low}"),
        "value low": _below(ci["value"], low, what=f"@value {_fmt(at['value'], ci['value'])} vs {low}"),
        "side high": _above(side_ci, high, what=f"{side_name} {_fmt(side, side_ci)} vs {high}"),
    }
    rules = {"induction": ("value high", "query low"), "direct retrieval": ("value low", "side high")}
    held = {label: all_of(tests[t][0] for t in names) for label, names in rules.items()}
    above, accuracy_words = _chance_test(accuracy, subset)
    if tests["learned"][0] is False:
        label, detail = "not learned", f"corrupting the key changes p(answer) by {_fmt(effect, effect_ci)} (<= {min_effect})"
    elif above is False:
        label, detail = "not learned", f"{accuracy_words}: not above chance (one-sided binomial test, 5%)"
    elif tests["learned"][0] is None:
        label, detail = "inconclusive", f"learned? {tests['learned'][1]}"
    elif held["induction"]:
        label = "induction"
        detail = f"association stored at the value by {where} (@value {_fmt(at['value'], ci['value'])})"
        detail += "".join(_conv_detail(conv_window, i, f", formed in layer {i}'s") for i in range(layer))
    elif held["direct retrieval"]:
        label = "direct retrieval"
        best = _best_single(window) or ("query" if at["query"] >= at["key"] else "key")
        cell = window.get(best) or (at[best], *ci[best])
        if best == "query":
            detail = f"answer already at the query by {where} (@query {_fmt(cell[0], cell[1:])}; {tests['side high'][1]})"
            label, detail = _pointer_reading(_at_read_point(pointer, site, layer), detail, where)
        else:
            detail = f"layer {layer} combines key and value itself (@{best} {_fmt(cell[0], cell[1:])} at {where}; {tests['side high'][1]})"
            detail += _conv_detail(conv_window, layer, ", in its")
    elif all(v is False for v in held.values()):
        label = "mixed"
        detail = ", ".join(f"@{r} {_fmt(at[r], ci[r])}" for r in ROLES) + f" at {where}"
    else:
        undecided = [tests[t][1] for names in rules.values() for t in names if tests[t][0] is None]
        label, detail = "inconclusive", f"at {where} the interval straddles the threshold: " + "; ".join(dict.fromkeys(undecided))
    if window and label != "not learned":
        detail += "; " + window_detail(window)
    if side_name == SUM and label in ("inconclusive", "mixed") and tests["value low"][0] is not False:
        lacking = lacking_rows(where)
        warnings.warn(lacking, stacklevel=2)
        detail += "; " + lacking
    n = int(rows["n"].iloc[0]) if "n" in rows else 0
    return Verdict(label, detail, effect, layer, site, subset, n, at["key"], at["value"], at["query"],
                   ci["key"], ci["value"], ci["query"], effect_ci, at[JOINT], ci[JOINT], window)


def lacking_rows(where: str) -> str:
    """What a verdict read by the published sum (SUM) lacked where direct retrieval was left undecided or failed
    by it, and the call that reads it."""
    return (f"the table lacks the rows that decide direct retrieval, the key and the query patched together at {where} "
            f"(position {JOINT!r}; read instead by the published sum {SUM}, whose intervals add): patch them too, "
            f"as `interchange`'s default positions and `intervene_run` do, e.g. positions=[\"key\", \"value\", "
            f"\"query\", \"{JOINT}\"]")


def _at_read_point(table: pd.DataFrame | None, site: str, layer: int) -> pd.Series | None:
    """The row of a per-read-point table (the pointer control's) at `site` of `layer`; None where absent."""
    if table is None or table.empty:
        return None
    rows = table[(table["site"] == site) & (table["layer"] == layer)]
    return None if rows.empty else rows.iloc[0]


def carries(row: pd.Series) -> str | None:
    """What the query holds by the pointer control's row: "answer" or "position" where that share's interval
    lies at or above POINTER_SHARE, "neither" where both lie below it, None where the data do not decide."""
    for follows in ("answer", "position"):
        if _above((row[f"{follows}_lo"], row[f"{follows}_hi"]), POINTER_SHARE, "")[0]:
            return follows
    below = [_above((row[f"{f}_lo"], row[f"{f}_hi"]), POINTER_SHARE, "")[0] is False for f in ("answer", "position")]
    return "neither" if all(below) else None


def _pointer_reading(row: pd.Series | None, detail: str, where: str) -> tuple[str, str]:
    """(label, detail) of a direct retrieval at the query after the pointer control (module docstring)."""
    if row is None:
        return "direct retrieval", detail + "; pointer control not run"
    shares = (f"with the queried pair moved, the clean query patched in at {where} makes the model output the "
              f"answer in {_fmt(row['answer'], (row['answer_lo'], row['answer_hi']))} and the token now at the "
              f"value's old position in {_fmt(row['position'], (row['position_lo'], row['position_hi']))} "
              f"(n = {int(row['n'])})")
    found = carries(row)
    if found == "answer":
        return "direct retrieval", f"{detail}; the query carries the answer: {shares}"
    if found == "position":
        return "positional pointer", f"the query holds where the value is, not the answer: {shares}"
    return "inconclusive", f"{detail}, but the pointer control does not decide what the query holds: {shares}"


SHOWN = 0.05  # a single position beyond the published three is named in the detail from this attribution on


def _window(carriers: pd.DataFrame | None, corrupt: str, subset: str, site: str, layer: int) -> dict:
    """The full-window cells read at the read point: name -> (attrib, lo, hi); {} where not given."""
    if carriers is None or carriers.empty:
        return {}
    rows = carriers[(carriers["corrupt"] == corrupt) & (carriers["site"] == site) & (carriers["layer"] == layer)]
    if "subset" in rows:
        rows = rows[rows["subset"] == subset]
    return {r["position"]: (float(r["attrib"]), float(r["attrib_lo"]), float(r["attrib_hi"])) for _, r in rows.iterrows()}


def _best_single(window: dict) -> str | None:
    """The single position of the full-window readout restoring most; None where not read."""
    singles = {k: v[0] for k, v in window.items() if k not in JOINTS}
    return max(singles, key=singles.get) if singles else None


def window_detail(window: dict) -> str:
    """How much of the effect the published three positions explain and where the rest is, in words."""
    cell = lambda name: _fmt(window[name][0], window[name][1:])  # noqa: E731
    extra = sorted((k for k in window if k not in (*JOINTS, *ROLES) and window[k][0] >= SHOWN),
                   key=lambda k: -window[k][0])
    singles = [k for k in window if k not in JOINTS]
    inner = [k for k in singles if k not in ("sep", "query")]
    text = (f"full window: key, value, query together restore {cell(PUBLISHED)}; {positions_words(inner)} together "
            f"{cell(WINDOW)}; {positions_words(singles)} together {cell(CARRIERS)}")
    text += f"; singly beyond the three: {', '.join(f'@{k} {cell(k)}' for k in extra)}" if extra else f"; no single position beyond the three restores {SHOWN} or more"
    return text + f"; the other positions between key and answer together {cell(OTHERS)}"


SPELLED = 4  # a run of consecutive positions longer than this reads as a range ("value … value+1023")


def positions_words(names: list[str]) -> str:
    """Window positions (`key`, `key+1`, …, `sep`, `query`) in words: each run of more than SPELLED
    consecutive offsets from one anchor as `first … last` (a long conv's window spans the whole sequence)."""
    def run_key(item: tuple[int, str]) -> tuple[str, int]:  # one anchor, offsets rising by one with the index
        i, name = item
        anchor, _, k = name.partition("+")
        return anchor, int(k or 0) - i

    words = []
    for _, run in groupby(enumerate(names), key=run_key):
        run = [name for _, name in run]
        words.append(f"{run[0]} … {run[-1]}" if len(run) > SPELLED else ", ".join(run))
    return ", ".join(words)


def _interval(rows: pd.DataFrame, position: str) -> tuple[float, float]:
    """The 95% interval of a cell's attribution; its point estimate twice where the table has no interval."""
    if position not in rows.index:
        return (math.nan, math.nan)
    point = float(rows.at[position, "attrib"])
    if "attrib_lo" not in rows or pd.isna(rows.at[position, "attrib_lo"]):
        return (point, point)
    return float(rows.at[position, "attrib_lo"]), float(rows.at[position, "attrib_hi"])


def _effect(rows: pd.DataFrame) -> tuple[float, tuple[float, float]]:
    """The key corruption's effect on p(answer) (the same on every row of one subset) and its 95% interval."""
    effect = float(rows["p_clean"].iloc[0] - rows["p_corrupt"].iloc[0])
    if "effect_lo" in rows and not pd.isna(rows["effect_lo"].iloc[0]):
        return effect, (float(rows["effect_lo"].iloc[0]), float(rows["effect_hi"].iloc[0]))
    return effect, (effect, effect)


def _chance_test(accuracy: Accuracy | None, subset: str) -> tuple[bool | None, str]:
    """`Accuracy.above_chance` on `subset`; undecided (None) without an accuracy."""
    return (None, "") if accuracy is None else accuracy.above_chance(subset)


def _not_learned_without_read_point(rows: pd.DataFrame, min_effect: float, subset: str,
                                    chance_test: tuple[bool | None, str]) -> Verdict:
    """`not learned` for a model with no read point (`read_point`) whose effect's interval lies at or below
    `min_effect`, or whose accuracy is not above chance (`chance_test`); NothingToRead where both say it learned
    (there is nothing to read its mechanism at)."""
    effect, effect_ci = _effect(rows)
    learned, what = _above(effect_ci, min_effect, strict=True, what=f"{_fmt(effect, effect_ci)}")
    if learned is False:
        why = f"corrupting the key changes p(answer) by {what} (<= {min_effect})"
    elif chance_test[0] is False:
        why = f"{chance_test[1]}: not above chance (one-sided binomial test, 5%)"
    else:
        raise NothingToRead(NO_READ_POINT)
    detail = f"{why}; no site to read its mechanism at (1 layer, no conv)"
    n = int(rows["n"].iloc[0]) if "n" in rows else 0
    return Verdict("not learned", detail, effect, 0, "resid_pre", subset, n, math.nan, math.nan, math.nan,
                   interval_effect=effect_ci)


def _sum(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    """An interval of a sum from two intervals (conservative: both hold together at >= 90%)."""
    return a[0] + b[0], a[1] + b[1]


def _above(ci: tuple[float, float], t: float, what: str, strict: bool = False) -> tuple[bool | None, str]:
    """Is the quantity >= t (> t if strict)? Decided by its interval (`intervals.above`), with `what` it compares."""
    return above(*ci, t, strict), what


def _below(ci: tuple[float, float], t: float, what: str) -> tuple[bool | None, str]:
    """Is the quantity <= t? Decided by its interval (`intervals.at_most`)."""
    return at_most(*ci, t), what


def _fmt(point: float, ci: tuple[float, float]) -> str:
    if math.isnan(ci[0]) or ci[0] == ci[1] == point:
        return f"{point:.2f}"
    return f"{point:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"


def formed_at(conv_window: pd.DataFrame | None, layer: int) -> pd.Series | None:
    """The single-offset `conv_out` cell of `layer` restoring most (sufficiency), if it restores >= FORMED."""
    if conv_window is None or conv_window.empty:
        return None
    best = best_cell(conv_window, layer)
    return best if best is not None and best["attrib"] >= FORMED else None


def _conv_detail(conv_window: pd.DataFrame | None, layer: int, lead: str) -> str:
    best = formed_at(conv_window, layer)
    if best is None:
        return ""
    return f"{lead} short conv window (conv_out at key+{int(best['offset'])} restores {best['attrib']:.2f})"
