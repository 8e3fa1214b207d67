"""Test accuracy of a run, overall and split by the queried pair (inside / outside the conv window).

Usage: python conv_window_acc.py RUN_DIR [...]   (final weights, or the checkpoint of an unfinished run)
The last two pairs lie in the query's receptive field through the two layers' short convs, so accuracy
"outside" (queried pair index < n_pairs - 2) is the one that needs retrieval. Evaluates the run's own
test set (eval.seed, eval.size), the one metrics.jsonl reports.
"""

import json
import sys

import torch

from mecheval.models import build_model
from mecheval.tasks import make_task
from mecheval.training.checkpoint import read_tensors
from mecheval.training.data import eval_sets
from mecheval.training.run_dir import RunDir

torch.set_num_threads(1)
for path in sys.argv[1:]:
    run = RunDir(path)
    cfg = run.read_config()
    final = (run / "model.safetensors").exists()
    tensors, _ = read_tensors(run / ("model.safetensors" if final else "checkpoint.safetensors"))
    lm = build_model(cfg.model).eval()
    lm.load_state_dict(tensors if final else {k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    task = make_task(cfg.task.name, **cfg.task.params)
    batch = eval_sets(task, ["test"], cfg.eval.size, cfg.eval.seed)["test"]
    with torch.no_grad():
        pred = torch.cat([lm(b.tokens, b.answer_pos).argmax(-1) for b in [batch]])
    hit = pred == batch.answer  # [B]
    pair = (batch.roles["key"] - 1) // 2  # [B] queried pair index
    inside = pair >= task.params.n_pairs - 2
    out = {
        "run": path, "weights": "final" if final else "checkpoint",
        "acc": hit.float().mean().item(),
        "acc_outside_last2": hit[~inside].float().mean().item(),
        "acc_last2": hit[inside].float().mean().item(),
        "n_outside": int((~inside).sum()),
    }
    print(json.dumps(out))
