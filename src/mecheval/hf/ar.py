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
import shutil
from pathlib import Path

import numpy as np
import torch

from mecheval.common import atomic_write_text
from mecheval.hf.wrap import HFLM, wrap
from mecheval.interventions.spec import ReadoutSpec
from mecheval.tasks.base import Task

RULES = ("random", "words")
WORD = re.compile(r"^ [a-z]{3,}$")  # the `words` rule: a single token that is a space and a lower-case word


def special_ids(model, tokenizer=None) -> set[int]:
    """The model's special token ids (config, and tokenizer where given); ValueError naming the config's ids
    that lie outside the model's vocabulary (GPT-2's default 50256 in a small one)."""
    c = model.config
    V = model.get_output_embeddings().out_features
    named = {f"{k}_token_id": getattr(c, f"{k}_token_id", None) for k in ("bos", "eos", "pad", "unk")}
    outside = [f"{k} {i}" for k, v in named.items() for i in (v if isinstance(v, list) else [v])
               if isinstance(i, int) and not 0 <= i < V]
    if outside:
        raise ValueError(f"the model's config names special token ids outside its vocabulary of {V} tokens: "
                         f"{', '.join(outside)} (set them to ids below {V}, or to null, in its config.json)")
    ids = set(named.values())
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
        raise ValueError("the 'words' rule needs the model's tokenizer and none is saved beside the model: use "
                         "`rule='random'`, or save it there (tokenizer.save_pretrained(DIR))")
    return np.array([i for i in range(min(V, len(tokenizer))) if i not in special and WORD.match(tokenizer.decode([i]))])


def vocab_map(model, task, rule: str = "random", seed: int = 0, tokenizer=None) -> torch.Tensor:
    """[task.vocab_size] model ids: the task's token i is the model's vocab_map[i] (module docstring)."""
    from mecheval.tasks.document import BOS

    pool = candidates(model, rule, tokenizer)
    need = task.vocab_size - (1 if model.config.bos_token_id is not None else 0)
    if len(pool) < need:
        raise ValueError(f"the {rule!r} rule finds {len(pool)} model tokens; AR with {task.params.n_keys} keys and "
                         f"values needs {need} (size the task with `ar_for`)")
    drawn = np.random.default_rng(seed).choice(pool, size=need, replace=False).tolist()
    ids = drawn[:BOS] + [model.config.bos_token_id] + drawn[BOS:] if model.config.bos_token_id is not None else drawn
    return torch.tensor(ids, dtype=torch.long)


def ar_for(model, pairs: int, rule: str = "random", tokenizer=None):
    """AR with `pairs` pairs and keys and values as many as the rule's tokens allow (`candidates`), up to the
    published 4096 each."""
    from mecheval.tasks import make_task

    found = len(candidates(model, rule, tokenizer))
    drawn = 2 if model.config.bos_token_id is not None else 3  # PAD, EOS, and BOS where the model has none
    each = min(4096, (found - drawn) // 2)
    if each < pairs:
        fix = f"lower `pairs` to {each} or fewer" if each >= 1 else "no pair fits: use a model with more tokens"
        raise ValueError(f"the {rule!r} rule finds {found} model tokens, too few keys and values for {pairs} pairs: {fix}")
    return make_task("ar", n_pairs=pairs, n_keys=each, n_values=each)


def load(model_dir: str) -> tuple[object, object | None]:
    """(model in eval mode, tokenizer or None) from a save_pretrained directory or a hub name already in
    the local cache (nothing is downloaded). ValueError where it cannot be loaded, or where its weights lack
    tensors the model has or hold tensors it has not (transformers would fill the missing ones randomly);
    the tokenizer is None where none is saved (transformers then builds one of special tokens only)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model, info = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, output_loading_info=True)
    except (OSError, ValueError) as e:
        raise ValueError(f"{model_dir}: cannot load a causal LM from it ({str(e).splitlines()[0]})") from None
    wrong = [f"{what} {len(info[k])} ({_names(info[k])})" for k, what in
             (("missing_keys", "missing"), ("unexpected_keys", "unexpected"), ("mismatched_keys", "of another shape"))
             if info.get(k)]
    if wrong:
        raise ValueError(f"{model_dir}: its saved weights do not fit {type(model).__name__} (transformers would fill "
                         f"missing ones randomly): weight tensors {'; '.join(wrong)}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    except (OSError, ValueError, TypeError):
        tokenizer = None
    if tokenizer is not None and len(tokenizer) <= len(set(tokenizer.all_special_ids)):
        tokenizer = None  # none saved: an empty vocabulary of special tokens only
    return model.float().eval(), tokenizer


def _names(keys, shown: int = 6) -> str:
    """Up to `shown` weight names (sorted), and how many more."""
    keys = sorted(k if isinstance(k, str) else str(k[0]) for k in keys)  # mismatched: (name, saved, expected)
    return ", ".join(keys[:shown]) + (f", … {len(keys) - shown} more" if len(keys) > shown else "")


def wrap_for_ar(model, tokenizer=None, rule: str = "random", pairs: int = 16, seed: int = 0) -> tuple[HFLM, Task]:
    """(the model wrapped to read AR in its vocabulary, `wrap(model, vocab_map(…))`; the task, `ar_for`):
    everything checked before anything is written (ValueError naming what is wrong)."""
    task = ar_for(model, pairs, rule, tokenizer)
    return wrap(model, vocab_map(model, task, rule, seed, tokenizer)), task


def intervene_hf(lm: HFLM, task, model_dir: str, out: Path, spec: ReadoutSpec, *, rule: str = "random"):
    """`intervene_run`'s tables, verdict and figures for a transformers model on AR in its vocabulary
    (`wrap_for_ar`; `model_dir`: where it was `load`ed from), read as `spec` asks, written to `out` with hf.json
    (the model, the rule, the ids) and report.md -> (table, verdict or None). `out` is locked while written
    (`DirLock`), and removed on failure where this call made it."""
    from mecheval.interventions.runs import intervene_model
    from mecheval.training.lock import DirLock

    out = Path(out)
    made = not out.exists()
    lock = DirLock(out, "readout directory").acquire()  # LockedError while another call writes there
    try:
        (out / "interventions").mkdir(parents=True, exist_ok=True)
        df, verdict = intervene_model(out, lm, task, spec)
        info = {"model": str(model_dir), "class": type(lm.model).__name__, "rule": rule, "task": task.name,
                "params": task.params.model_dump(), "vocab": lm.vocab.tolist(), "sites": list(lm.sites())}
        atomic_write_text(out / "hf.json", json.dumps(info, indent=2) + "\n")
        atomic_write_text(out / "report.md", report(info, out, verdict))
    except BaseException:
        if made:
            shutil.rmtree(out, ignore_errors=True)
        raise
    finally:
        lock.release()
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

