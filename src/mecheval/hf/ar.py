"""AR in a `transformers` model's own vocabulary (`mecheval intervene --hf DIR`).

The task is mecheval's AR (the published layout `<bos> k1 v1 … kN vN <eos> kq vq <eos>` and its roles);
its token ids are mapped to the model's by `vocab_map` under a stated rule:
    random   keys and values: distinct ids drawn uniformly (seeded) from the model's vocabulary, the
             model's special ids (bos, eos, pad, unk) left out
    words    the same draw from the single-token words: ids whose token decodes to a space and 3+
             lower-case letters (" cat"), so each key and value is one ordinary word (needs the tokenizer)
    BOS is the model's bos_token_id where it has one; PAD and EOS are two more ids drawn by the rule.
The model reads the mapped ids; its scores (probabilities, accuracy) are over the task's tokens only: the
logits at the mapped ids (`wrap(model, vocab)`), a choice among the AR vocabulary.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import torch

from mecheval.common import atomic_write_text
from mecheval.hf.wrap import HFLM, wrap

RULES = ("random", "words")
WORD = re.compile(r"^ [a-z]{3,}$")  # the `words` rule: a single token that is a space and a lower-case word


def special_ids(model, tokenizer=None) -> set[int]:
    """The model's special token ids (config, and tokenizer where given)."""
    c = model.config
    ids = {getattr(c, f"{k}_token_id", None) for k in ("bos", "eos", "pad", "unk")}
    if tokenizer is not None:
        ids |= set(tokenizer.all_special_ids)
    flat = set()
    for i in ids:
        flat |= set(i) if isinstance(i, list) else {i}
    return {i for i in flat if isinstance(i, int)}


def candidates(model, rule: str, tokenizer=None) -> np.ndarray:
    """The model ids the rule draws from (module docstring), ascending."""
    if rule not in RULES:
        raise ValueError(f"token rule must be one of {RULES}, got {rule!r}")
    V = model.get_output_embeddings().out_features
    special = special_ids(model, tokenizer)
    if rule == "random":
        return np.array([i for i in range(V) if i not in special])
    if tokenizer is None:
        raise ValueError("the 'words' rule needs the model's tokenizer (none found beside the model); use 'random'")
    return np.array([i for i in range(min(V, len(tokenizer))) if i not in special and WORD.match(tokenizer.decode([i]))])


def vocab_map(model, task, rule: str = "random", seed: int = 0, tokenizer=None) -> torch.Tensor:
    """[task.vocab_size] model ids: the task's token i is the model's vocab_map[i] (module docstring)."""
    from mecheval.tasks.document import BOS

    pool = candidates(model, rule, tokenizer)
    need = task.vocab_size - (1 if model.config.bos_token_id is not None else 0)
    if len(pool) < need:
        raise ValueError(f"the {rule!r} rule finds {len(pool)} model tokens; AR with these parameters needs {need} "
                         f"(lower --hf-pairs, or n_keys/n_values)")
    drawn = np.random.default_rng(seed).choice(pool, size=need, replace=False).tolist()
    ids = drawn[:BOS] + [model.config.bos_token_id] + drawn[BOS:] if model.config.bos_token_id is not None else drawn
    return torch.tensor(ids, dtype=torch.long)


def ar_for(model, pairs: int):
    """AR with `pairs` pairs and keys and values as many as the model's vocabulary allows, up to the
    published 4096 each."""
    from mecheval.tasks import make_task

    V = model.get_output_embeddings().out_features
    each = min(4096, (V - 4) // 2)
    if each < pairs:
        raise ValueError(f"a vocabulary of {V} tokens holds too few keys and values for {pairs} pairs")
    return make_task("ar", n_pairs=pairs, n_keys=each, n_values=each)


def load(model_dir: str) -> tuple[object, object | None]:
    """(model in eval mode, tokenizer or None) from a save_pretrained directory or a hub name already in
    the local cache (nothing is downloaded)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True)
    except (OSError, ValueError) as e:
        raise ValueError(f"--hf {model_dir}: cannot load a causal LM from it ({str(e).splitlines()[0]})") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    except (OSError, ValueError, TypeError):
        tokenizer = None
    return model.float().eval(), tokenizer


def intervene_hf(model, tokenizer, model_dir: str, out: Path, *, rule: str = "random", pairs: int = 16, **kw):
    """`intervene_run`'s tables, verdict and figures for a transformers model (`load`ed from `model_dir`) on AR
    in its vocabulary, written to `out` with hf.json (the model, the rule, the ids) and report.md
    -> (table, verdict or None). kw: `interventions.runs.intervene_model`'s options (corrupt, n, sites, …)."""
    from mecheval.interventions.runs import intervene_model

    task = ar_for(model, pairs)
    vocab = vocab_map(model, task, rule, kw.get("seed", 0), tokenizer)
    lm: HFLM = wrap(model, vocab)
    out = Path(out)
    (out / "interventions").mkdir(parents=True, exist_ok=True)
    df, verdict = intervene_model(out, lm, task, **kw)
    info = {"model": str(model_dir), "class": type(model).__name__, "rule": rule, "task": task.name,
            "params": task.params.model_dump(), "vocab": vocab.tolist(), "sites": list(lm.sites())}
    atomic_write_text(out / "hf.json", json.dumps(info, indent=2) + "\n")
    atomic_write_text(out / "report.md", report(info, out, verdict))
    return df, verdict


def report(info: dict, out: Path, verdict) -> str:
    """report.md: what was run, the accuracy with its interval, the verdict, and the figures."""
    v = json.loads((out / "verdict.json").read_text()) if (out / "verdict.json").exists() else {}
    p = info["params"]
    lines = [f"# {info['class']} from `{info['model']}` on AR", "",
             f"AR with {p['n_pairs']} pairs over {p['n_keys']} keys and {p['n_values']} values, in the model's vocabulary "
             f"(rule `{info['rule']}`: see docs/huggingface.md); scores over the task's tokens.", ""]
    if "acc_all" in v:
        lines.append(f"- accuracy: {v['acc_all']:.3f} (95% interval {v['acc_all_lo']:.3f}–{v['acc_all_hi']:.3f}, n = {v['n_all']})")
    lines.append(f"- mechanism: **{verdict.label}** — {verdict.detail}" if verdict is not None else "- mechanism: nothing to read")
    lines += ["", *(f"![{png.stem}](interventions/{png.name})" for png in sorted((out / "interventions").glob("*.png")))]
    return "\n".join(lines) + "\n"

