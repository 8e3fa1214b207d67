"""Straightforward one-document-at-a-time ATR generation: the readable ground truth that the batched
path (`pcfg.derive`, `queries.choose_queries`) is tested against, and the benchmark's baseline."""

from __future__ import annotations

import numpy as np

from mecheval.tasks.atr.pcfg import Grammar


def derive_one(grammar: Grammar, rng: np.random.Generator) -> tuple[list[int], list[int], list[int]]:
    """One derivation by recursion: (terminal labels, head position or -1, depth) per terminal."""
    labels: list[int] = []
    parent: list[int] = []
    depth: list[int] = []

    def emit(label: int, d: int) -> int:
        labels.append(label)
        parent.append(-1)
        depth.append(d)
        return len(labels) - 1

    def expand(a: int, d: int) -> int:
        probs = np.diff(grammar.rule_cdf[a, : grammar.n_rules[a]], prepend=0.0)
        r = rng.choice(len(probs), p=probs)
        rhs = zip(grammar.rhs_sym[a, r, : grammar.rhs_len[a, r]], grammar.rhs_is_t[a, r])
        dependents = [emit(int(s), d + 1) if is_t else expand(int(s), d + 1) for s, is_t in rhs]
        head_probs = np.diff(grammar.head_cdf[a], prepend=0.0)
        head = emit(int(rng.choice(grammar.n_terminals, p=head_probs)), d + 1)
        for c in dependents:
            parent[c] = head
        return head

    expand(int(rng.integers(grammar.n_nonterminals)), 0)
    return labels, parent, depth


def query_one(labels: list[int], parent: list[int], rng: np.random.Generator, pair_ok) -> int | None:
    """The query terminal's position (a uniform head, then a uniform eligible dependent), or None."""
    rightmost = {label: i for i, label in enumerate(labels)}
    eligible = [
        i
        for i, label in enumerate(labels)
        if parent[i] >= 0 and rightmost[label] == i and pair_ok(label, labels[parent[i]])
    ]
    if not eligible:
        return None
    target = rng.choice(sorted({parent[i] for i in eligible}))
    return int(rng.choice([i for i in eligible if parent[i] == target]))
