"""The published ATR-easy grammar and data sets, rebuilt from the published generator's random draws.

The study's generator (aryamanarora/tinylang, tinylang/language/pcfg.py, config
languages/pcfg_vary_difficulty/pcfg_5_20.yaml, built by tinylang/make_languages.py) seeds numpy's
legacy global generator with 42 and then draws, in this order: the grammar (depth caps, rules,
rule probabilities, head distributions), 100,032 training documents, 1,024 test documents; all with
`np.random` calls. This script is our own re-implementation of that draw order (reference only, no
code copied): it replays the same calls on `np.random.RandomState(42)`, so it yields the published
grammar and the published train and test sets themselves (checked against the original on the first
documents: see docs/findings/atr.md).

    .venv/bin/python tools/atr/atr_published.py --out /tmp/atr_published.npz

The npz holds the grammar as `mecheval.tasks.atr.pcfg.Grammar` arrays (so `derive` samples from it)
and both sets as token rows (`<bos> t… <eos> q target <eos>`, token ids as ours: terminals from 3).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

N_T, N_NT, MAX_RHS, MAX_RULES, MAX_DEPTH = 20, 40, 5, 5, 10  # the easy config (pcfg_5_20.yaml)
TERMINAL_START = 3


class PublishedEasy:
    """The published easy grammar, drawn from `rng` (a RandomState seeded 42) in the published order."""

    def __init__(self, rng: np.random.RandomState):
        self.rng = rng
        caps = [rng.randint(1, MAX_DEPTH + 1) for _ in range(N_NT)]
        self.depth_cap = np.array(caps)
        # symbols: nonterminal a -> ("n", a); terminal t -> ("t", t)
        self.rules: list[list[list[tuple[str, int]]]] = []
        for a in range(N_NT):
            k = rng.randint(1, MAX_RULES + 1)
            allowed = [b for b in range(N_NT) if caps[b] > caps[a]]
            pool = [("n", b) for b in allowed] + [("t", t) for t in range(N_T)]
            rules = []
            for _ in range(k):
                size = rng.randint(1, MAX_RHS)  # evaluated before the choice (it is its argument)
                idx = rng.choice(len(pool), size=size, replace=True)
                rules.append([pool[i] for i in idx])
            self.rules.append(rules)
        self.rule_probs = [rng.dirichlet(np.ones(len(r))) for r in self.rules]
        self.head_probs = [rng.dirichlet(np.ones(N_T)) for _ in range(N_NT)]
        self.start_probs = np.ones(N_NT) / N_NT

    def derive(self) -> tuple[list[int], list[int]]:
        """One sentence: (terminal labels, parent position or -1), by the published stack DFS with the
        head to the right (a nonterminal draws its rule, then its head, then pushes head and children)."""
        rng = self.rng
        stack = [("n", int(rng.choice(N_NT, p=self.start_probs)), None)]  # (kind, symbol, head id)
        next_id = 1
        out: list[tuple[int, int, int | None]] = []  # (label, id, head id)
        while stack:
            kind, sym, head_id, *own = stack.pop()
            if kind == "t":
                out.append((sym, own[0], head_id))
                continue
            this_head = next_id
            next_id += 1
            rhs = self.rules[sym][rng.choice(len(self.rules[sym]), p=self.rule_probs[sym])]
            head = rng.choice(N_T, p=self.head_probs[sym])
            stack.append(("t", int(head), head_id, this_head))
            for child in reversed(rhs):
                stack.append((child[0], child[1], this_head, next_id))
                next_id += 1
        pos_of = {node_id: i for i, (_, node_id, _) in enumerate(out)}
        labels = [lab for lab, _, _ in out]
        parent = [pos_of[h] if h is not None else -1 for _, _, h in out]
        return labels, parent

    def sample(self) -> tuple[list[int], int, int]:
        """One document as published: (labels, query position, target position)."""
        rng = self.rng
        while True:
            labels, parent = self.derive()
            if len(labels) < 3:
                continue
            rightmost = {lab: i for i, lab in enumerate(labels)}
            pairs = sorted((parent[q], q) for q in range(len(labels)) if parent[q] >= 0 and rightmost[labels[q]] == q)
            if pairs:
                break
        rng.choice([0])  # the query type (one type: parent)
        targets = list(set(t for t, _ in pairs))  # the published set order
        target = int(rng.choice(targets))
        query = int(rng.choice([q for t, q in pairs if t == target]))
        return labels, query, target

    def as_grammar(self):
        """The grammar as our `Grammar` arrays (the easy spec)."""
        from mecheval.tasks.atr.pcfg import GRAMMARS, Grammar

        s_max = MAX_RHS - 1
        n_rules = np.array([len(r) for r in self.rules])
        rule_cdf = np.ones((N_NT, MAX_RULES))
        rhs_len = np.zeros((N_NT, MAX_RULES), dtype=np.int64)
        rhs_sym = np.zeros((N_NT, MAX_RULES, s_max), dtype=np.int64)
        rhs_is_t = np.zeros((N_NT, MAX_RULES, s_max), dtype=bool)
        for a, rules in enumerate(self.rules):
            rule_cdf[a, : len(rules) - 1] = np.cumsum(self.rule_probs[a])[: len(rules) - 1]
            for r, rhs in enumerate(rules):
                rhs_len[a, r] = len(rhs)
                for j, (kind, sym) in enumerate(rhs):
                    rhs_sym[a, r, j], rhs_is_t[a, r, j] = sym, kind == "t"
        head_cdf = np.cumsum(np.array(self.head_probs), axis=1)
        head_cdf[:, -1] = 1.0
        head_flat = (head_cdf + np.arange(N_NT)[:, None]).ravel()
        return Grammar(GRAMMARS["easy"], self.depth_cap, n_rules, rule_cdf, rhs_len, rhs_sym, rhs_is_t, head_cdf, head_flat)


def tokens(labels: list[int], query: int, target: int) -> list[int]:
    ctx = [lab + TERMINAL_START for lab in labels]
    return [1, *ctx, 2, ctx[query], ctx[target], 2]


def build(n_train: int = 100_032, n_test: int = 1024, seed: int = 42):
    g = PublishedEasy(np.random.RandomState(seed))
    sets = {}
    for split, n in (("train", n_train), ("test", n_test)):
        rows, kv = [], []
        for _ in range(n):
            labels, q, t = g.sample()
            rows.append(tokens(labels, q, t))
            kv.append(t - q)
        sets[split] = (rows, np.array(kv))
    return g, sets


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/atr_published.npz")
    ap.add_argument("--n-train", type=int, default=100_032)
    args = ap.parse_args()
    t0 = time.time()
    g, sets = build(args.n_train)
    gr = g.as_grammar()
    width = max(len(r) for rows, _ in sets.values() for r in rows)
    pad = lambda rows: np.array([r + [0] * (width - len(r)) for r in rows])  # noqa: E731
    np.savez_compressed(
        args.out, **{f"grammar_{k}": getattr(gr, k) for k in ("depth_cap", "n_rules", "rule_cdf", "rhs_len", "rhs_sym", "rhs_is_t", "head_cdf", "head_flat")},
        train=pad(sets["train"][0]), test=pad(sets["test"][0]), train_kv=sets["train"][1], test_kv=sets["test"][1],
    )
    for split, (rows, kv) in sets.items():
        ctx = np.array([len(r) - 5 for r in rows])
        print(f"{split}: n={len(rows)} context mean {ctx.mean():.2f} median {np.median(ctx):.0f} max {ctx.max()} | "
              f"full length mean {ctx.mean() + 5:.2f} | kv distance mean {kv.mean():.2f}")
    print(f"{time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
