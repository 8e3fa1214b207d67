"""The unambiguous parent query of ATR, and the held-out (query, target) pairs of its generalisation split.

A query is a terminal with a head whose type does not occur again to its right (the rightmost
occurrence of its type, so `q` names it unambiguously); the answer is its head's type. A document's
query is drawn like the published generator's: first a target (head) uniformly among the heads of
eligible queries, then a query uniformly among that head's eligible dependents.
"""

from __future__ import annotations

import numpy as np

from mecheval.tasks.atr.pcfg import Forest

_MIX = np.uint64(0x9E3779B97F4A7C15)


def heldout(query: np.ndarray, target: np.ndarray, frac: float, seed: int) -> np.ndarray:
    """[M] whether the (query, target) terminal pair is held out: a seeded hash of the pair < frac."""
    with np.errstate(over="ignore"):  # the pair and seed, then the splitmix64 finaliser
        x = (query.astype(np.uint64) << np.uint64(32)) ^ target.astype(np.uint64) ^ (np.uint64(seed) * _MIX)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) / float(1 << 53) < frac


def last_in_group(keys: tuple[np.ndarray, ...], score: np.ndarray) -> np.ndarray:
    """Indices of the element with the largest `score` in each group of equal `keys`."""
    order = np.lexsort((score, *reversed(keys)))
    if len(order) == 0:
        return order
    same_next = np.ones(len(order), dtype=bool)
    for k in keys:
        same_next[:-1] &= k[order[:-1]] == k[order[1:]]
    same_next[-1] = False
    return order[~same_next]


def choose_queries(forest: Forest, pair_ok, rng: np.random.Generator) -> np.ndarray:
    """[B] the position of each document's query terminal (its key), -1 where none is eligible.

    pair_ok(query_labels [M], target_labels [M]) -> [M] bool filters pairs by split.
    """
    doc, starts = forest.doc, forest.starts
    pos = np.arange(len(doc)) - starts[doc]
    rightmost = np.zeros(len(doc), dtype=bool)
    rightmost[last_in_group((doc, forest.label), pos)] = True
    head = np.where(forest.parent >= 0, starts[doc] + forest.parent, -1)  # global index of the head
    ok = rightmost & (head >= 0)
    ok[ok] = pair_ok(forest.label[ok], forest.label[head[ok]])
    cand = np.flatnonzero(ok)
    targets, inv = np.unique(head[cand], return_inverse=True)
    chosen = np.full(len(forest.length), -1)
    t = last_in_group((doc[targets],), rng.random(len(targets)))
    chosen[doc[targets[t]]] = targets[t]
    cand = cand[targets[inv] == chosen[doc[cand]]]
    key = np.full(len(forest.length), -1)
    q = cand[last_in_group((doc[cand],), rng.random(len(cand)))]
    key[doc[q]] = pos[q]
    return key
