#!/usr/bin/env bash
# (the session's helper: queues train in a worktree at /work/runner so that edits to src/ do not reach a running study)
# copies finished queue studies from the runner worktree into main (no snapshots, checkpoints, worker files, run-level
# readout PNGs: the study's figures/ keeps the copies its report shows), archives logs, relabels by main's rules
cd /work/main
for d in $(cd /work/runner && ls -d results/*/*/ | sed 's#/$##'); do
  [[ -f /work/runner/$d/report.md && -f /work/runner/$d/study.json ]] || continue
  [[ -d $d ]] && continue
  mkdir -p $d && (cd /work/runner/$d && tar cf - --exclude=snapshots --exclude=checkpoint.safetensors --exclude=worker.json --exclude=.lock --exclude=report.html --exclude='runs/*/interventions/*.png' .) | (cd $d && tar xf -)
  .venv/bin/mecheval archive-logs $d > /dev/null
  PYTHONPATH=/work/main .venv/bin/mecheval relabel $d --recheck > /dev/null 2>&1 || echo "relabel failed: $d"
  PYTHONPATH=tools .venv/bin/python -m landing.drop_uncited_weights $d || echo "weights kept: $d"
  echo "landed $d"
done
