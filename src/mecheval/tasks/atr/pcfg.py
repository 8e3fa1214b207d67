"""The random PCFG of Associative Treecall: a seeded grammar and batched derivations.

Grammar (built once from a seed): N nonterminals, each with a depth cap in 1..max_depth; a
nonterminal may only expand into nonterminals with a larger cap, so every derivation terminates
after at most max_depth expansions. Each nonterminal has 1..max_rules rules (Dirichlet(1) rule
probabilities); a rule's right-hand side has 1..max_rhs_len-1 symbols, each drawn from
{terminal} ∪ {allowed nonterminals}, the terminal class weighing `terminal_weight` against 1 per
nonterminal (a drawn terminal is uniform over the terminals and fixed in the rule). Each
nonterminal has a Dirichlet(1) distribution over terminals for its head.

Derivation: expanding a nonterminal emits its children's yields and then its head terminal, to
their right. A terminal child, and the head of a nonterminal child, depend on the parent's head:
the terminals of a document form a dependency tree (the root's head has no parent).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field


class GrammarSpec(BaseModel):
    """The shape of a random grammar (the seed is separate)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_terminals: int = Field(20, ge=2)
    n_nonterminals: int = Field(40, ge=1)
    max_rhs_len: int = Field(5, ge=2, description="right-hand sides have 1..max_rhs_len-1 symbols")
    max_rules: int = Field(5, ge=1)
    max_depth: int = Field(10, ge=1)
    terminal_weight: float | None = Field(
        None, gt=0, description="weight of the terminal class in a rule (None: n_terminals)"
    )

    @property
    def terminal_mass(self) -> float:
        return float(self.n_terminals if self.terminal_weight is None else self.terminal_weight)


# The three published grammars (Lmax = max_rhs_len).
GRAMMARS: dict[str, GrammarSpec] = {
    "easy": GrammarSpec(n_terminals=20, max_rhs_len=5),
    "medium": GrammarSpec(n_terminals=20, max_rhs_len=10),
    "large_vocab": GrammarSpec(n_terminals=8192, max_rhs_len=5, terminal_weight=20.0),
}


@dataclass(frozen=True)
class Grammar:
    """A sampled grammar as padded arrays (N nonterminals, R = max_rules, S = max_rhs_len - 1).

    depth_cap: [N]        n_rules: [N]
    rule_cdf:  [N, R]     cumulative rule probabilities (1.0 from the last real rule on)
    rhs_len:   [N, R]     rhs_sym: [N, R, S] nonterminal index or terminal index
    rhs_is_t:  [N, R, S]  whether rhs_sym is a terminal
    head_cdf:  [N, T]     cumulative head-terminal probabilities (last column exactly 1.0)
    head_flat: [N * T]    head_cdf + row index, flattened: one sorted array for all rows
    """

    spec: GrammarSpec
    depth_cap: np.ndarray
    n_rules: np.ndarray
    rule_cdf: np.ndarray
    rhs_len: np.ndarray
    rhs_sym: np.ndarray
    rhs_is_t: np.ndarray
    head_cdf: np.ndarray
    head_flat: np.ndarray

    @property
    def n_terminals(self) -> int:
        return self.spec.n_terminals

    @property
    def n_nonterminals(self) -> int:
        return self.spec.n_nonterminals

    def rules(self, nt: int) -> list[tuple[float, list[str]]]:
        """Readable rules of nonterminal `nt`: (probability, right-hand side + head marker)."""
        probs = np.diff(self.rule_cdf[nt, : self.n_rules[nt]], prepend=0.0)
        out = []
        for r, p in enumerate(probs):
            rhs = [
                f"t{s}" if t else f"NT{s}"
                for s, t in zip(self.rhs_sym[nt, r, : self.rhs_len[nt, r]], self.rhs_is_t[nt, r])
            ]
            out.append((float(p), rhs + ["<head>"]))
        return out


def build_grammar(spec: GrammarSpec, seed: int) -> Grammar:
    """Samples the grammar `spec` from `seed` (a deterministic function of both)."""
    rng = np.random.default_rng([seed, 0x9CF6])
    n, t = spec.n_nonterminals, spec.n_terminals
    r_max, s_max = spec.max_rules, spec.max_rhs_len - 1
    depth_cap = rng.integers(1, spec.max_depth + 1, size=n)
    n_rules = rng.integers(1, r_max + 1, size=n)
    rule_cdf = np.ones((n, r_max))
    rhs_len = np.zeros((n, r_max), dtype=np.int64)
    rhs_sym = np.zeros((n, r_max, s_max), dtype=np.int64)
    rhs_is_t = np.zeros((n, r_max, s_max), dtype=bool)
    for a in range(n):
        allowed = np.flatnonzero(depth_cap > depth_cap[a])
        p_terminal = spec.terminal_mass / (spec.terminal_mass + len(allowed))
        k = n_rules[a]
        rule_cdf[a, : k - 1] = np.cumsum(rng.dirichlet(np.ones(k)))[: k - 1]
        rhs_len[a, :k] = rng.integers(1, s_max + 1, size=k)
        choices = allowed if len(allowed) else np.zeros(1, dtype=np.int64)  # unused when empty
        rhs_is_t[a, :k] = rng.random((k, s_max)) < p_terminal  # always True when nothing allowed
        terminals = rng.integers(0, t, size=(k, s_max))
        nonterminals = choices[rng.integers(0, len(choices), size=(k, s_max))]
        rhs_sym[a, :k] = np.where(rhs_is_t[a, :k], terminals, nonterminals)
    head_cdf = np.cumsum(rng.dirichlet(np.ones(t), size=n), axis=1)
    head_cdf[:, -1] = 1.0
    head_flat = (head_cdf + np.arange(n)[:, None]).ravel()
    return Grammar(spec, depth_cap, n_rules, rule_cdf, rhs_len, rhs_sym, rhs_is_t, head_cdf, head_flat)


def sample_heads(grammar: Grammar, nts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Head terminals [M] of nonterminals `nts` [M], by inverse CDF on the row-shifted flat CDF."""
    t = grammar.n_terminals
    idx = np.searchsorted(grammar.head_flat, rng.random(len(nts)) + nts, side="right") - nts * t
    return np.minimum(idx, t - 1)


def sample_rules(grammar: Grammar, nts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Rule indices [M] of nonterminals `nts` [M]."""
    return (rng.random(len(nts))[:, None] >= grammar.rule_cdf[nts]).sum(1)


@dataclass(frozen=True)
class Forest:
    """B derived documents as ragged arrays over their terminals (M in all).

    label:  [M] terminal index        parent: [M] position of the head within its document (-1: root)
    depth:  [M] depth in the derivation (root's children: 1)
    length: [B] terminals per document; document b is the slice starts[b]:starts[b]+length[b]
    """

    label: np.ndarray
    parent: np.ndarray
    depth: np.ndarray
    length: np.ndarray

    @property
    def starts(self) -> np.ndarray:
        return np.cumsum(self.length) - self.length

    @property
    def doc(self) -> np.ndarray:
        """[M] the document index of each terminal."""
        return np.repeat(np.arange(len(self.length)), self.length)


def derive(grammar: Grammar, n: int, rng: np.random.Generator, max_length: int) -> Forest:
    """Derives `n` documents level by level, all documents at once; drops those over `max_length`.

    Every node carries (symbol, is_terminal, doc, id, parent id, depth); a nonterminal's id is the
    id its head terminal will carry, so children point at their head before it is placed.
    """
    sym = rng.integers(0, grammar.n_nonterminals, size=n)  # start: uniform over nonterminals
    is_t = np.zeros(n, dtype=bool)
    doc = np.arange(n)
    nid = np.arange(n)
    pid = np.full(n, -1)
    depth = np.zeros(n, dtype=np.int64)
    next_id = n
    while not is_t.all():
        exp = np.flatnonzero(~is_t)  # [E] nodes to expand
        a = sym[exp]
        rule = sample_rules(grammar, a, rng)
        size = grammar.rhs_len[a, rule]  # children per expansion
        head = sample_heads(grammar, a, rng)
        count = np.ones(len(sym), dtype=np.int64)
        count[exp] = size + 1
        src = np.repeat(np.arange(len(sym)), count)  # [M'] source node of each new node
        j = np.arange(len(src)) - np.repeat(np.cumsum(count) - count, count)  # slot within the source
        e_of = np.full(len(sym), -1)
        e_of[exp] = np.arange(len(exp))
        e = e_of[src]
        sym, is_t, doc, nid, pid, depth = (x[src] for x in (sym, is_t, doc, nid, pid, depth))
        new = np.flatnonzero(e >= 0)
        is_child = j[new] < size[e[new]]
        child, hd = new[is_child], new[~is_child]
        ec, jc = e[child], j[child]
        sym[child] = grammar.rhs_sym[a[ec], rule[ec], jc]
        is_t[child] = grammar.rhs_is_t[a[ec], rule[ec], jc]
        pid[child] = nid[child]  # children depend on the expanded node's head
        nid[child] = next_id + np.arange(len(child))
        next_id += len(child)
        sym[hd] = head[e[hd]]  # the head keeps the expanded node's id and parent
        is_t[hd] = True
        depth[new] += 1
        too_long = np.bincount(doc, minlength=n) > max_length
        if too_long.any():
            keep = ~too_long[doc]
            sym, is_t, doc, nid, pid, depth = (x[keep] for x in (sym, is_t, doc, nid, pid, depth))
    kept = np.flatnonzero(np.bincount(doc, minlength=n) > 0)
    length = np.bincount(doc, minlength=n)[kept]
    starts = np.cumsum(length) - length
    pos = np.arange(len(sym)) - np.repeat(starts, length)
    pos_of_id = np.full(next_id, -1)
    pos_of_id[nid] = pos
    parent = np.where(pid >= 0, pos_of_id[np.maximum(pid, 0)], -1)
    return Forest(label=sym, parent=parent, depth=depth, length=length)


def take(forest: Forest, docs: np.ndarray) -> Forest:
    """The documents `docs` [B'] of `forest`, in that order."""
    length = forest.length[docs]
    idx = np.repeat(forest.starts[docs] - (np.cumsum(length) - length), length) + np.arange(length.sum())
    return Forest(forest.label[idx], forest.parent[idx], forest.depth[idx], length)


def concat(forests: list[Forest]) -> Forest:
    """The documents of all `forests`, one after the other."""
    return Forest(*(np.concatenate([getattr(f, k) for f in forests]) for k in ("label", "parent", "depth", "length")))
