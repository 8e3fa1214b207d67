"""Associative Treecall (ATR): recall the head of a terminal in a random PCFG's dependency tree.

Document: `<bos> t… <eos> q target <eos>`, right-padded with PAD; the target (the head of the
rightmost occurrence of q in the context) is predicted at q's position. Roles: `key` = that
occurrence of q, `value` = its head (to the right, not always adjacent), `sep` = the `<eos>` before
the query, `query` = q. Token ids: PAD 0, BOS 1, EOS 2, terminals [3, 3 + n_terminals).

Splits: `train` and `test` exclude the held-out (query, target) pairs (a `holdout_frac` share of all
terminal pairs) as queried pairs; `heldout` (only with holdout_frac > 0) queries only them.

Grammar: a seeded draw of ours (`grammar_draw="mecheval"`), or the published easy grammar itself, rebuilt from
the published generator's draws (`"published"`, `tasks/atr/published.py`); with `"published-sets"` a run with
`train_size` trains on the published training set itself (`training_set`), in its order. `"published-split"` and
`"published-split-sets"` are the same for the published generalisation language: its own grammar and its held-out
pairs (the published draw of `holdout_frac`) in place of our hashed ones.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal, get_args

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from mecheval.tasks.atr.published import N_TEST, N_TRAIN, SEED, published_documents, published_grammar, published_heldout
from mecheval.tasks.atr.pcfg import GRAMMARS, Forest, build_grammar, concat, derive, take
from mecheval.tasks.atr.queries import choose_queries, heldout
from mecheval.tasks.atr.tree import DependencyTree
from mecheval.tasks.base import MAX_SEQ_LEN
from mecheval.tasks.batch import Batch
from mecheval.tasks.corruption import replace_at, role_position
from mecheval.tasks.document import BOS, EOS, N_SPECIAL, PAD, SPECIAL_NAMES, DocumentTask
from mecheval.tasks.sampling import corruption_rng, other, rng_for

MIN_TERMINALS = 3  # as published: shorter derivations are redrawn

# The published grammars are single random draws, and statistics vary a lot between draws (easy:
# mean length 14-21 over 600 seeds; medium: 33-120). These seeds were chosen, from a scan of seeds,
# for statistics closest to the published generator's (PUBLISHED_STATS; `mecheval data stats atr`).
# large_vocab has the same terminal mass as easy, so the same seed gives it the same tree shapes.
CALIBRATED_SEEDS = {"easy": 326, "medium": 126, "large_vocab": 326}

# Measured on the published generator (paper_setup.md): full sequence length (tokens) and key-value
# distance, on about 1024 test documents.
PUBLISHED_STATS = {
    "easy": {"length": {"mean": 20, "median": 14, "max": 88}, "kv_distance": {"mean": 2.4}},
    "medium": {"length": {"mean": 42, "max": 246}},
}


# Groups of similar length per batch by default (`Task.length_groups`): trainer steps per second against the padded
# batch, d = 64, batch 32, every zoo mixer (docs/speed.md, benchmarks/length_groups.py): medium 2.3-2.9x with 3
# groups (1.9-2.3x with 2), easy 1.4-1.6x with 2 or 3.
LENGTH_GROUPS = 3
GrammarDraw = Literal["mecheval", "published", "published-sets", "published-split", "published-split-sets"]
SPLIT_DRAWS = ("published-split", "published-split-sets")  # the published generalisation language
SET_DRAWS = ("published-sets", "published-split-sets")  # a fixed training set: the published one


class ATRParams(BaseModel):
    """Parameters of ATR: a published grammar, its seed (or the published draw), and the generalisation split."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    grammar: Literal["easy", "medium", "large_vocab"] = "easy"
    grammar_seed: int | None = Field(None, ge=0, description="None: the preset's calibrated seed")
    holdout_frac: float = Field(0.0, ge=0.0, lt=1.0, description="share of (query, target) pairs held out")
    max_length: int = Field(1024, ge=MIN_TERMINALS, le=MAX_SEQ_LEN, description="longest context (terminals); longer ones are redrawn")
    grammar_draw: GrammarDraw = Field(
        "mecheval", description="mecheval: our draw of the grammar from its seed; published: the published easy grammar "
        "itself (RandomState(42), tasks/atr/published.py), documents drawn by our sampler; published-sets: that grammar, "
        "and a run's training pool (train_size) is the published training set in its order; published-split and "
        "published-split-sets: the same for the published generalisation language (its grammar and its held-out "
        "pairs, drawn with holdout_frac: the published 0.2)",
    )

    @model_validator(mode="after")
    def _published_draw(self) -> "ATRParams":
        draw = self.grammar_draw
        if draw != "mecheval" and self.grammar != "easy":
            raise ValueError(f"grammar_draw {draw!r} is the published easy grammar; it needs grammar 'easy', not {self.grammar!r}")
        if draw != "mecheval" and self.grammar_seed is not None:
            raise ValueError(f"grammar_draw {draw!r} has the published seed (42); grammar_seed applies to grammar_draw 'mecheval'")
        if draw == "published-sets" and self.holdout_frac > 0:
            raise ValueError("grammar_draw 'published-sets' trains on the published training set, which holds no pairs out; "
                             "use grammar_draw 'published-split-sets' (the published generalisation language's)")
        if draw in SPLIT_DRAWS and self.holdout_frac == 0:
            raise ValueError(f"grammar_draw {draw!r} is the published generalisation language: it needs holdout_frac "
                             "(the published 0.2)")
        return self

    @property
    def split_frac(self) -> float:
        """The share of pairs the published generalisation language holds out, where it is drawn; else 0."""
        return self.holdout_frac if self.grammar_draw in SPLIT_DRAWS else 0.0


class ATRTask(DocumentTask):
    """Parent queries over derivations of a seeded random PCFG."""

    name = "atr"
    Params = ATRParams

    def __init__(self, params: ATRParams):
        self.params = params
        if params.grammar_draw == "mecheval":
            seed = CALIBRATED_SEEDS[params.grammar] if params.grammar_seed is None else params.grammar_seed
            self.grammar_seed, self.grammar = seed, build_grammar(GRAMMARS[params.grammar], seed)
        else:
            self.grammar_seed, self.grammar = SEED, published_grammar(params.split_frac)
        self.terminal_range = (N_SPECIAL, N_SPECIAL + self.grammar.n_terminals)

    @property
    def splits(self) -> tuple[str, ...]:
        return ("train", "test", "heldout") if self.params.holdout_frac > 0 else ("train", "test")

    @property
    def vocab_size(self) -> int:
        return self.terminal_range[1]

    @property
    def published_stats(self) -> dict[str, dict[str, float]]:
        """The published generator's figures for this grammar (empty for other seeds and for the generalisation
        language, another grammar)."""
        if self.params.split_frac or self.params.grammar_seed not in (None, CALIBRATED_SEEDS[self.params.grammar]):
            return {}
        return PUBLISHED_STATS.get(self.params.grammar, {})

    @property
    def length_groups(self) -> int:
        """Documents of very different lengths: LENGTH_GROUPS groups per batch."""
        return LENGTH_GROUPS

    @property
    def training_set_size(self) -> int | None:
        """With grammar_draw "published-sets" or "published-split-sets": the published training set's size; else
        None (drawn)."""
        return N_TRAIN if self.params.grammar_draw in SET_DRAWS else None

    def training_set(self, n: int) -> Batch:
        """The first `n` documents of the published training set, in the published order."""
        if self.training_set_size is None:
            raise ValueError(f"only grammar_draw {' or '.join(map(repr, SET_DRAWS))} has a fixed training set")
        return self._batch(*published_documents(n, 0, self.params.split_frac)["train"])

    def published_test_set(self, n: int = N_TEST, split: str = "test") -> Batch:
        """The first `n` documents of the published test set (its accuracy read the first 320), for a run trained on
        the published grammar: its accuracy there is like for like with the published value. With the generalisation
        language, `split` "heldout" is its test set (the published held-out accuracy) and "test" its dev set."""
        if self.params.grammar_draw == "mecheval":
            raise ValueError("the published test set is of the published grammar: grammar_draw "
                             f"{' or '.join(repr(d) for d in get_args(GrammarDraw) if d != 'mecheval')}")
        sets = published_documents(N_TRAIN, n, self.params.split_frac)
        if split not in sets:
            raise ValueError(f"the published sets of grammar_draw {self.params.grammar_draw!r} are {', '.join(sets)}; "
                             f"the published held-out set is the generalisation language's ('published-split')")
        return self._batch(*sets[split])

    @cached_property
    def chance_accuracy(self) -> float:
        """Guessing one of the context's terminal types: mean of 1 / #types over 1024 test examples."""
        forest, _ = self.documents(1024, seed=0, split="test")
        pairs = np.unique(forest.doc * self.grammar.n_terminals + forest.label)
        types = np.bincount(pairs // self.grammar.n_terminals)  # distinct types per document
        return float(np.mean(1.0 / types))

    def is_heldout(self, query: np.ndarray, target: np.ndarray) -> np.ndarray:
        """[M] whether (query, target) terminal ids form a held-out pair."""
        lo = self.terminal_range[0]
        return self._held_out(query - lo, target - lo)

    def _held_out(self, query: np.ndarray, target: np.ndarray) -> np.ndarray:
        """[M] whether (query, target) terminal labels (from 0) form a held-out pair: the published generalisation
        language's draw (`grammar_draw` "published-split*"), else a seeded hash of ours."""
        if self.params.split_frac:
            return published_heldout(self.params.split_frac)[target, query]
        return heldout(query, target, self.params.holdout_frac, self.grammar_seed)

    def documents(self, n: int, seed: int, split: str = "train") -> tuple[Forest, np.ndarray]:
        """`n` derivations with an eligible query, and the position of each query terminal [n].

        Derivations are drawn in rounds, sized by the share accepted so far, until n are accepted.
        """
        rng = rng_for(self.name, seed, split, self.splits)
        want = split == "heldout"
        pair_ok = lambda q, t: self._held_out(q, t) == want  # noqa: E731
        forests, keys, have, drawn = [], [], 0, 0
        while have < n:
            accepted = max(have / drawn, 0.02) if drawn else 0.8
            size = int((n - have) / accepted * 1.1) + 8
            forest = derive(self.grammar, size, rng, self.params.max_length)
            key = choose_queries(forest, pair_ok, rng)
            ok = np.flatnonzero((key >= 0) & (forest.length >= MIN_TERMINALS))[: n - have]
            forests.append(take(forest, ok))
            keys.append(key[ok])
            have, drawn = have + len(ok), drawn + size
        return concat(forests), np.concatenate(keys)

    def sample(self, n: int, seed: int, split: str = "train") -> Batch:
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        return self._batch(*self.documents(n, seed, split))

    def _batch(self, forest: Forest, key: np.ndarray) -> Batch:
        """The batch of documents `forest` queried at the context positions `key` [n]."""
        n = len(forest.length)
        m = forest.length  # [B] context terminals
        starts, doc = forest.starts, forest.doc
        pos = 1 + np.arange(len(doc)) - starts[doc]  # sequence position of every terminal
        rows = np.arange(n)
        value = forest.parent[starts + key]  # context position (0-based) of the key's head
        tokens = np.full((n, m.max() + 5), PAD, dtype=np.int64)
        tokens[doc, pos] = forest.label + N_SPECIAL
        tokens[rows, 0] = BOS
        tokens[rows, m + 1] = EOS
        tokens[rows, m + 2] = forest.label[starts + key] + N_SPECIAL
        answer = forest.label[starts + value] + N_SPECIAL
        tokens[rows, m + 3] = answer
        tokens[rows, m + 4] = EOS
        parent = np.full(tokens.shape, -1)
        parent[doc, pos] = np.where(forest.parent >= 0, forest.parent + 1, -1)
        depth = np.zeros(tokens.shape, dtype=np.int64)
        depth[doc, pos] = forest.depth
        t = torch.from_numpy
        return Batch(
            tokens=t(tokens),
            lengths=t(m + 5),
            answer=t(answer),
            answer_pos=t(m + 2),
            roles={"key": t(key + 1), "value": t(value + 1), "sep": t(m + 1), "query": t(m + 2)},
            extra={"parent": t(parent), "depth": t(depth)},
        )

    def corrupt(self, batch: Batch, role: str, seed: int) -> Batch:
        """The terminal at `role` replaced by another terminal, uniform over the other types."""
        pos = role_position(batch, role, self.corruptible_roles)
        old = batch.tokens[torch.arange(len(batch)), torch.as_tensor(pos)].cpu().numpy()
        return replace_at(batch, pos, other(corruption_rng(self.name, role, seed), old, *self.terminal_range))

    def move(self, batch: Batch, seed: int) -> tuple[Batch, torch.Tensor]:
        """Another document's context (drawn per example among those that fit the batch's length) put before
        the context: `<bos> filler context <eos> q target <eos>`. The query's rightmost occurrence, its head
        and the answer are unchanged; every context position shifts by the filler's length, so the clean
        value's absolute position holds another token (distances to the query are kept: this move tests
        absolute pointers, AR's also relative ones). Examples no filler fits are left unmoved."""
        rng = corruption_rng(self.name, "move", seed)
        T = batch.tokens.shape[1]
        m = (batch.lengths - 5).tolist()  # context terminals
        tokens, parent = torch.full_like(batch.tokens, PAD), torch.full_like(batch.extra["parent"], -1)
        depth, shift = torch.zeros_like(batch.extra["depth"]), torch.zeros(len(batch), dtype=torch.long)
        for i in range(len(batch)):
            fits = [f for f in range(len(batch)) if f != i and m[f] + m[i] + 5 <= T]
            f = int(rng.choice(fits)) if fits else None
            s = m[f] if f is not None else 0
            tokens[i, 0] = BOS
            if s:
                tokens[i, 1 : s + 1] = batch.tokens[f, 1 : s + 1]
                parent[i, 1 : s + 1] = batch.extra["parent"][f, 1 : s + 1]
                depth[i, 1 : s + 1] = batch.extra["depth"][f, 1 : s + 1]
            n = int(batch.lengths[i])
            tokens[i, s + 1 : s + n] = batch.tokens[i, 1:n]
            old = batch.extra["parent"][i, 1:n]
            parent[i, s + 1 : s + n] = torch.where(old >= 0, old + s, old)
            depth[i, s + 1 : s + n] = batch.extra["depth"][i, 1:n]
            shift[i] = s
        moved = Batch(tokens=tokens, lengths=batch.lengths + shift, answer=batch.answer.clone(),
                      answer_pos=batch.answer_pos + shift, roles={k: v + shift for k, v in batch.roles.items()},
                      extra={"parent": parent, "depth": depth})
        return moved, batch.roles["value"].clone()

    def answer_derivable(self, batch: Batch) -> torch.Tensor:
        """[B] whether the query's rightmost occurrence in the context has the answer as its head.

        True for clean batches; after corrupting the key it stays True only where the query's type
        also occurs further left with a head of the answer's type.
        """
        t = batch.tokens
        rows = torch.arange(len(batch))
        q = t[rows, batch.roles["query"]]
        positions = torch.arange(t.shape[1])
        in_context = (positions[None] > 0) & (positions[None] < batch.roles["sep"][:, None])
        hits = (t == q[:, None]) & in_context
        last = torch.where(hits, positions[None], -1).amax(1)  # [B] -1 where q is gone
        head = batch.extra["parent"][rows, last.clamp(min=0)]
        return (last >= 0) & (head >= 0) & (t[rows, head.clamp(min=0)] == batch.answer)

    def tree(self, batch: Batch, i: int) -> DependencyTree:
        """The dependency tree of example `i` (text: `.render()`)."""
        n = int(batch.lengths[i])
        return DependencyTree(
            tokens=self.decode(batch.tokens[i, :n]),
            parent=batch.extra["parent"][i, :n].tolist(),
            depth=batch.extra["depth"][i, :n].tolist(),
            key=int(batch.roles["key"][i]),
            value=int(batch.roles["value"][i]),
        )

    def decode(self, tokens: torch.Tensor | list[int]) -> list[str]:
        return [SPECIAL_NAMES.get(t, f"t{t - N_SPECIAL}") for t in torch.as_tensor(tokens).tolist()]
