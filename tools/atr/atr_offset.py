"""Why ATR-easy accuracies sit under the published ones: grammar statistics, train/test prompt overlap and the
ambiguity ceiling, for our grammar seeds and for the published grammar (`mecheval.tasks.atr.published`).

    .venv/bin/python tools/atr/atr_offset.py --seeds 326 0 1 2 ... [--published]

Per grammar (documents drawn with our sampler, whose query choice follows the published one):
- length (full sequence, context + 5) mean / median / max and key-value distance on 1,024 test documents;
- seen: the share of 1,024 test prompts (context + query) that occur among 100,032 training prompts;
- ceiling: the ambiguity ceiling. A reference sample of --ref documents gives, per prompt, the counts of
  its answers. For 20,000 other documents whose prompt occurs in the reference ("covered"): `maj` = the
  accuracy of answering the reference majority (an achievable predictor: a lower bound on the Bayes
  accuracy of the covered prompts), `plug` = mean max-share (an upper bound in expectation), `amb` = the
  share whose prompt had more than one answer in the reference.
For the published grammar the published sets themselves are also read (their exact seen share).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mecheval.tasks.atr.pcfg import Grammar
from mecheval.tasks.atr.published import published_documents
from mecheval.tasks.atr.task import ATRParams, ATRTask

_P1, _P2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F)


def _doc_hash(values: np.ndarray, length: np.ndarray) -> np.ndarray:
    """[B] uint64 polynomial hash (two bases, mod 2^64) of each document's values (ragged by `length`)."""
    starts = np.cumsum(length) - length
    pos = (np.arange(len(values)) - np.repeat(starts, length)).astype(np.uint64)
    out = np.zeros(len(length), dtype=np.uint64)
    with np.errstate(over="ignore"):
        v = values.astype(np.uint64) + np.uint64(1)
        for p in (_P1, _P2):
            powers = np.ones(int(length.max()) + 1, dtype=np.uint64)
            for i in range(1, len(powers)):
                powers[i] = powers[i - 1] * p
            h = np.add.reduceat(v * powers[pos], starts) if len(values) else out
            out = out * _P2 + h + length.astype(np.uint64) * p
    return out


def prompts(task: ATRTask, n: int, seed: int, split: str) -> tuple[np.ndarray, np.ndarray, dict]:
    """(prompt hash [n], answer label [n], statistics) of n documents."""
    forest, key = task.documents(n, seed, split)
    starts = forest.starts
    qlab = forest.label[starts + key]
    ans = forest.label[starts + forest.parent[starts + key]]
    h = _doc_hash(forest.label, forest.length)
    with np.errstate(over="ignore"):
        h = h * _P1 + qlab.astype(np.uint64) * np.uint64(1000003) + np.uint64(7)
    full = forest.length + 5
    kv = forest.parent[starts + key] - key
    stats = {"len_mean": full.mean(), "len_median": float(np.median(full)), "len_max": int(full.max()), "kv": kv.mean()}
    return h, ans, stats


def ceiling(task: ATRTask, n_ref: int, n_test: int = 20_000, chunk: int = 250_000) -> dict:
    hs, ans = [], []
    for c in range(0, n_ref, chunk):
        h, a, _ = prompts(task, min(chunk, n_ref - c), 10_000 + c // chunk, "train")
        hs.append(h)
        ans.append(a)
    h, a = np.concatenate(hs), np.concatenate(ans)
    pair = np.unique(np.stack([h, a.astype(np.uint64)], 1), axis=0, return_counts=True)
    (ph, pa), pc = pair[0].T, pair[1]
    uh, first, n_answers = np.unique(ph, return_index=True, return_counts=True)
    total = np.add.reduceat(pc, first)
    order = np.lexsort((-pc, ph))  # within each prompt: largest count first
    best = pa[order][first]  # majority answer (ties: smallest label among the largest)
    best_share = pc[order][first] / total
    th, ta, _ = prompts(task, n_test, 99_999, "test")
    i = np.searchsorted(uh, th)
    i = np.minimum(i, len(uh) - 1)
    cov = uh[i] == th
    return {
        "covered": cov.mean(),
        "maj": (best[i][cov] == ta[cov]).mean(),
        "plug": best_share[i][cov].mean(),
        "amb": (n_answers[i][cov] > 1).mean(),
    }


def posterior(grammar: Grammar, w: np.ndarray, k: int) -> np.ndarray:
    """[T] P(answer label | context w, key position k): the exact posterior over parses of w of the label of
    k's head, given that k has one (inside algorithm; the published query choice, which weighs parses by
    1/#targets, is not conditioned on, so the argmax is an achievable predictor, not quite the Bayes one).

    Spans [i, j] derived by A have A's head at j. For a rule A -> X1..Xm the children cover [i, j-1];
    C = S1 D U S2 D U .. Sm D, with S the children's inside matrices (a terminal: diag(w == t)), U the
    shift (U[p, p+1] = 1) and D weighting a child that ends at p under a head at l+1 by Theta[p, l]:
    d log P(w) / d Theta[p, l] = P(parent(p) = l+1 | w)."""
    import torch

    n, T = len(w), grammar.n_terminals
    wt = torch.as_tensor(w)
    U = torch.diag(torch.ones(n - 1, dtype=torch.float64), 1)
    theta = torch.ones(n, n, dtype=torch.float64, requires_grad=True)
    term = {t: torch.diag((wt == t).double()) for t in range(T)}
    head_p = np.diff(grammar.head_cdf, axis=1, prepend=0.0)
    rule_p = np.diff(grammar.rule_cdf, axis=1, prepend=0.0)
    inside: dict[int, torch.Tensor] = {}
    for a in np.argsort(-grammar.depth_cap, kind="stable"):
        acc = torch.zeros(n, n, dtype=torch.float64)
        for r in range(grammar.n_rules[a]):
            m = grammar.rhs_len[a, r]
            mats = [term[int(s)] if t else inside[int(s)] for s, t in zip(grammar.rhs_sym[a, r, :m], grammar.rhs_is_t[a, r, :m])]
            v = mats[-1] * torch.diagonal(theta)[None, :]
            for s_mat in reversed(mats[:-1]):
                v = s_mat @ (theta * (U @ v))
            acc = acc + float(rule_p[a, r]) * v
        inside[int(a)] = (acc @ U) * torch.as_tensor(head_p[a][w])[None, :]
    z = sum(inside[a][0, n - 1] for a in range(grammar.n_nonterminals)) / grammar.n_nonterminals
    torch.log(z).backward()
    p_head = theta.grad[k, k:n - 1].numpy()  # P(parent(k) = j | w), j = k+1 .. n-1
    out = np.bincount(w[k + 1:], weights=p_head, minlength=T)
    return out / out.sum()


def posterior_ceiling(task: ATRTask, n: int, seed: int = 7, max_len: int = 120) -> dict:
    """On n test documents: the accuracy of the exact-posterior MAP answer, the mean max posterior, and the
    same on the documents whose prompt is not unique-answer (max posterior < 0.999)."""
    forest, key = task.documents(n, seed, "test")
    starts = forest.starts
    hit, top, amb = [], [], []
    for b in range(n):
        m = int(forest.length[b])
        if m > max_len:
            continue
        w = forest.label[starts[b]: starts[b] + m]
        k = int(key[b])
        ans = w[forest.parent[starts[b] + k]]
        post = posterior(task.grammar, w, k)
        hit.append(post.argmax() == ans)
        top.append(post.max())
        amb.append(post.max() < 0.999)
    hit, top, amb = map(np.array, (hit, top, amb))
    return {"n": len(hit), "map_acc": hit.mean(), "mean_max_post": top.mean(), "ambiguous": amb.mean(),
            "map_acc_ambiguous": hit[amb].mean() if amb.any() else float("nan")}


def grammar_task(seed: int | None = None, published: bool = False) -> ATRTask:
    """ATR easy on our grammar of `seed` (None: the calibrated one), or on the published grammar."""
    return ATRTask(ATRParams(grammar="easy", grammar_seed=seed, grammar_draw="published" if published else "mecheval"))


def published_sets() -> dict:
    """The published train/test sets (`mecheval.tasks.atr.published`): share of test prompts (all 1024, the first
    320 evaluated) seen in train, full lengths and key-value distances."""
    sets = published_documents()

    def prompts_of(split):  # context + query, as bytes
        f, key = sets[split]
        return [np.append(f.label[s: s + m], f.label[s + k]).tobytes() for s, m, k in zip(f.starts, f.length, key)]

    train = set(prompts_of("train"))
    seen = np.array([k in train for k in prompts_of("test")])
    test, key = sets["test"]
    n = test.length + 5  # the full sequence
    kv = test.parent[test.starts + key] - key
    return {"seen_1024": seen.mean(), "seen_320": seen[:320].mean(), "len_mean": n.mean(), "len_median": float(np.median(n)),
            "len_max": int(n.max()), "len_max_320": int(n[:320].max()), "len_median_320": float(np.median(n[:320])),
            "len_mean_320": n[:320].mean(), "kv": kv.mean(), "kv_320": kv[:320].mean(), "train_unique": len(train)}


def local(task: ATRTask, n_train: int = 100_032, n_test: int = 8192) -> dict:
    """Shallow predictors: answer = the token after the key (`next`), = the last context token (`last`), and a
    lookup table from (query, the 3 tokens after the key) to the training majority answer (`window3`)."""
    def feats(n, seed, split):
        forest, key = task.documents(n, seed, split)
        st, lab = forest.starts, np.concatenate([forest.label, np.full(3, -1)])
        idx = st + key
        ends = st + forest.length
        nxt = [np.where(idx + d < ends, lab[idx + d], -1) for d in (1, 2, 3)]
        ans = forest.label[st + forest.parent[idx]]
        f = ((forest.label[idx] * 21 + nxt[0] + 1) * 21 + nxt[1] + 1) * 21 + nxt[2] + 1
        return f, ans, nxt[0], forest.label[ends - 1]
    f, a, _, _ = feats(n_train, 0, "train")
    tf, ta, tn, tl = feats(n_test, 1, "test")
    pair, cnt = np.unique(np.stack([f, a], 1), axis=0, return_counts=True)
    order = np.lexsort((-cnt, pair[:, 0]))
    uf, first = np.unique(pair[order][:, 0], return_index=True)
    best = pair[order][first, 1]
    i = np.minimum(np.searchsorted(uf, tf), len(uf) - 1)
    pred = np.where(uf[i] == tf, best[i], tn)
    return {"next": (tn == ta).mean(), "last": (tl == ta).mean(), "window3": (pred == ta).mean()}


def row(name: str, task: ATRTask, n_ref: int) -> str:
    h_train, _, _ = prompts(task, 100_032, 0, "train")
    h_test, _, st = prompts(task, 1024, 0, "test")
    seen = np.isin(h_test, h_train).mean()
    c = ceiling(task, n_ref)
    h = local(task)
    return (f"| {name} | {st['len_mean']:.1f} | {st['len_median']:.0f} | {st['len_max']} | {st['kv']:.2f} | {seen:.3f} | "
            f"{task.chance_accuracy:.3f} | {c['covered']:.3f} | {c['maj']:.4f} | {c['amb']:.4f} | {h['next']:.3f} | {h['last']:.3f} | {h['window3']:.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="*", default=[326])
    ap.add_argument("--published", action="store_true", help="also the published grammar and sets (tasks/atr/published.py)")
    ap.add_argument("--ref", type=int, default=1_000_000, help="reference documents for the ceiling")
    args = ap.parse_args()
    print("| grammar | len mean | len median | len max | kv | seen | chance | covered | maj acc (covered) | ambiguous (covered) | next | last | window3 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    if args.published:
        t0 = time.time()
        print(row("published (seed 42)", grammar_task(published=True), args.ref), f"{time.time() - t0:.0f}s", flush=True)
        print("published sets:", {k: round(float(v), 4) for k, v in published_sets().items()}, flush=True)
    for s in args.seeds:
        t0 = time.time()
        print(row(f"seed {s}", grammar_task(seed=s), args.ref), f"{time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
