"""The published ATR-easy grammar and data sets, rebuilt from the published generator's random draws.

The study's generator (aryamanarora/tinylang: `tinylang/language/pcfg.py`, config
`languages/pcfg_vary_difficulty/pcfg_5_20.yaml`, built by `tinylang/make_languages.py`) seeds numpy's legacy
global generator with 42 and then draws, in this order: the grammar (depth caps, rules, rule probabilities,
head distributions), 100,032 training documents, then 1,024 test documents. This module is our own
re-implementation of that draw order (reference only, no code copied): it replays the same draws on
`np.random.RandomState(42)`, so it yields the published grammar and the published training and test sets
themselves (checked against the original on the first 2,000 documents: docs/findings/atr.md, "The ATR-easy
offset").

The generalisation language (`languages/pcfg_train_test_split/pcfg.yaml`: the easy config with
`train_test_split: 0.2`) draws its held-out pairs first, a [20, 20] uniform matrix below 0.2 over (target,
query) terminal labels, and then the grammar, which is therefore another grammar than easy's; then 100,032
training documents and 1,024 dev documents that query no held-out pair, and 1,024 test documents that query
only held-out pairs (the published held-out accuracy is read on those). `holdout_frac` selects it.

- `published_grammar(holdout_frac)`: the grammar as our `Grammar` arrays, which our sampler (`pcfg.derive`)
  draws from (`ATRParams.grammar_draw="published"`, or `"published-split"` for the generalisation language).
- `published_heldout(holdout_frac)`: the generalisation language's held-out pairs, [target, query] labels.
- `published_documents(n_train, n_test, holdout_frac)`: the published sets as a `Forest` and the key position
  of each document (`grammar_draw="published-sets"` / `"published-split-sets"` trains on the training set).
"""

from __future__ import annotations

import functools

import numpy as np

from mecheval.tasks.atr.pcfg import GRAMMARS, Forest, Grammar

SEED = 42  # make_languages.py's np.random.seed
N_TRAIN, N_TEST = 100_032, 1024  # the published sets, drawn in this order after the grammar
SPEC = GRAMMARS["easy"]  # pcfg_5_20.yaml: 20 terminals, 40 nonterminals, rhs up to 5, 5 rules, depth 10
MIN_TERMINALS = 3  # shorter derivations are redrawn


def _pick(rng: np.random.RandomState, cdf: np.ndarray) -> int:
    """What `rng.choice(len(p), p=p)` draws, given cdf = p.cumsum() / p.sum(): one uniform, inverse CDF."""
    return int(cdf.searchsorted(rng.random_sample(), side="right"))


def _cdf(p: np.ndarray) -> np.ndarray:
    cdf = p.cumsum()
    return cdf / cdf[-1]


class PublishedEasy:
    """The published easy grammar and its document sampler, drawing from `rng` in the published order.

    Built from a fresh `RandomState(42)`, the grammar is the published one, and the documents that `sample`
    then returns are the published training set followed by the published test set.
    """

    def __init__(self, rng: np.random.RandomState, holdout_frac: float = 0.0):
        self.rng = rng
        n_nt, n_t = SPEC.n_nonterminals, SPEC.n_terminals
        # [target label, query label] held out of training's queries; drawn before the grammar, where there is a split
        self.heldout = rng.rand(n_t, n_t) < holdout_frac if holdout_frac > 0 else np.zeros((n_t, n_t), dtype=bool)
        caps = [rng.randint(1, SPEC.max_depth + 1) for _ in range(n_nt)]
        self.depth_cap = np.array(caps)
        # a right-hand side is a list of (is_terminal, symbol)
        self.rules: list[list[list[tuple[bool, int]]]] = []
        for a in range(n_nt):
            k = rng.randint(1, SPEC.max_rules + 1)
            pool = [(False, b) for b in range(n_nt) if caps[b] > caps[a]] + [(True, t) for t in range(n_t)]
            rules = []
            for _ in range(k):
                size = rng.randint(1, SPEC.max_rhs_len)  # drawn before the choice (it is its argument)
                rules.append([pool[i] for i in rng.choice(len(pool), size=size, replace=True)])
            self.rules.append(rules)
        self.rule_probs = [rng.dirichlet(np.ones(len(r))) for r in self.rules]
        self.head_probs = [rng.dirichlet(np.ones(n_t)) for _ in range(n_nt)]
        self._start_cdf = _cdf(np.ones(n_nt) / n_nt)
        self._rule_cdf = [_cdf(p) for p in self.rule_probs]
        self._head_cdf = [_cdf(p) for p in self.head_probs]

    def derive(self) -> tuple[list[int], list[int], list[int]]:
        """One derivation: (terminal labels, parent position or -1, depth), by the published stack DFS with the
        head to the right (a nonterminal draws its rule, then its head, then pushes its head and its children)."""
        rng = self.rng
        # (is_terminal, symbol, parent's head id, own id, depth); a nonterminal's id is its head terminal's
        stack = [(False, _pick(rng, self._start_cdf), None, 0, 0)]
        next_id = 1
        out: list[tuple[int, int, int | None, int]] = []  # (label, id, head id, depth)
        while stack:
            is_t, sym, head_id, own_id, depth = stack.pop()
            if is_t:
                out.append((sym, own_id, head_id, depth))
                continue
            rhs = self.rules[sym][_pick(rng, self._rule_cdf[sym])]
            head = _pick(rng, self._head_cdf[sym])
            stack.append((True, head, head_id, own_id, depth + 1))
            for child_is_t, child in reversed(rhs):
                stack.append((child_is_t, child, own_id, next_id, depth + 1))
                next_id += 1
        pos_of = {node_id: i for i, (_, node_id, _, _) in enumerate(out)}
        return ([label for label, _, _, _ in out], [-1 if h is None else pos_of[h] for _, _, h, _ in out],
                [d for _, _, _, d in out])

    def sample(self, held_out: bool = False) -> tuple[list[int], list[int], list[int], int]:
        """One document as published: (labels, parents, depths, key position). Derivations shorter than 3
        terminals or without a queryable terminal (a rightmost occurrence with a head, whose (head, terminal) pair
        is held out if `held_out`, else not; with no pair held out, any) are redrawn."""
        rng = self.rng
        split = self.heldout.any()
        while True:
            labels, parent, depth = self.derive()
            if len(labels) < MIN_TERMINALS:
                continue
            rightmost = {label: i for i, label in enumerate(labels)}
            pairs = sorted((parent[q], q) for q in range(len(labels)) if parent[q] >= 0 and rightmost[labels[q]] == q
                           and (not split or self.heldout[labels[parent[q]], labels[q]] == held_out))
            if pairs:
                break
        rng.choice([0])  # the query type (one type: parent)
        targets = list(set(t for t, _ in pairs))  # in the published set order
        target = int(rng.choice(targets))
        key = int(rng.choice([q for t, q in pairs if t == target]))
        return labels, parent, depth, key

    def as_grammar(self) -> Grammar:
        """The grammar as our `Grammar` arrays (the easy spec)."""
        n_nt, r_max, s_max = SPEC.n_nonterminals, SPEC.max_rules, SPEC.max_rhs_len - 1
        rule_cdf = np.ones((n_nt, r_max))
        rhs_len = np.zeros((n_nt, r_max), dtype=np.int64)
        rhs_sym = np.zeros((n_nt, r_max, s_max), dtype=np.int64)
        rhs_is_t = np.zeros((n_nt, r_max, s_max), dtype=bool)
        for a, rules in enumerate(self.rules):
            rule_cdf[a, : len(rules) - 1] = np.cumsum(self.rule_probs[a])[: len(rules) - 1]
            for r, rhs in enumerate(rules):
                rhs_len[a, r] = len(rhs)
                for j, (is_t, sym) in enumerate(rhs):
                    rhs_sym[a, r, j], rhs_is_t[a, r, j] = sym, is_t
        head_cdf = np.cumsum(np.array(self.head_probs), axis=1)
        head_cdf[:, -1] = 1.0
        head_flat = (head_cdf + np.arange(n_nt)[:, None]).ravel()
        n_rules = np.array([len(r) for r in self.rules])
        return Grammar(SPEC, self.depth_cap, n_rules, rule_cdf, rhs_len, rhs_sym, rhs_is_t, head_cdf, head_flat)


def published_grammar(holdout_frac: float = 0.0) -> Grammar:
    """The published easy grammar (RandomState(42)'s first draws); with `holdout_frac` > 0 the generalisation
    language's (drawn after its held-out pairs). One object per grammar."""
    return _grammar(float(holdout_frac))


@functools.cache
def _grammar(holdout_frac: float) -> Grammar:
    return PublishedEasy(np.random.RandomState(SEED), holdout_frac).as_grammar()


@functools.cache
def published_heldout(holdout_frac: float) -> np.ndarray:
    """[n_terminals, n_terminals] bool: the generalisation language's held-out (target, query) label pairs."""
    return PublishedEasy(np.random.RandomState(SEED), holdout_frac).heldout


def published_documents(n_train: int = N_TRAIN, n_test: int = N_TEST,
                        holdout_frac: float = 0.0) -> dict[str, tuple[Forest, np.ndarray]]:
    """split -> (the first `n_train` / `n_test` documents of the published training / test set, [n] each
    document's key position). The test set is drawn after all N_TRAIN training documents (about 10 s for both).
    With `holdout_frac` > 0, the generalisation language's sets, named as our splits are: `train`, `test` (its dev
    set, drawn next: no held-out pair queried) and `heldout` (its test set, drawn last: only held-out pairs)."""
    if not (0 <= n_train <= N_TRAIN and 0 <= n_test <= N_TEST):
        raise ValueError(f"the published sets hold {N_TRAIN} training and {N_TEST} test documents; asked for "
                         f"{n_train} and {n_test}")
    return _documents(int(n_train), int(n_test), float(holdout_frac))


@functools.lru_cache(maxsize=2)
def _documents(n_train: int, n_test: int, holdout_frac: float) -> dict[str, tuple[Forest, np.ndarray]]:
    g = PublishedEasy(np.random.RandomState(SEED), holdout_frac)
    drawn = [g.sample() for _ in range(N_TRAIN if n_test else n_train)]
    if holdout_frac == 0:
        return {"train": _forest(drawn[:n_train]), "test": _forest([g.sample() for _ in range(n_test)])}
    dev = [g.sample() for _ in range(N_TEST if n_test else 0)]
    return {"train": _forest(drawn[:n_train]), "test": _forest(dev[:n_test]),
            "heldout": _forest([g.sample(held_out=True) for _ in range(n_test)])}


def _forest(docs: list[tuple[list[int], list[int], list[int], int]]) -> tuple[Forest, np.ndarray]:
    """Documents as one `Forest` and their key positions."""
    cat = lambda i: np.array([x for d in docs for x in d[i]], dtype=np.int64)  # noqa: E731
    length = np.array([len(d[0]) for d in docs], dtype=np.int64)
    return Forest(label=cat(0), parent=cat(1), depth=cat(2), length=length), np.array([d[3] for d in docs], dtype=np.int64)
