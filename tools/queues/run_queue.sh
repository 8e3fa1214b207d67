#!/usr/bin/env bash
# Runs a queue file's studies one after another (one line: OUT_DIR then the `mecheval study` arguments),
# niced, one worker each; a finished study (its report.md newer than its sweep) is skipped, an unfinished
# one resumes. Usage: tools/queues/run_queue.sh tools/queues/issue53-a.txt; SCALE=cpu for a queue of cpu-scale
# studies (default: paper). Two runners of one queue fill two cores: each takes the next study the other does not
# hold (an flock on OUT_DIR/.queue-lock, held by the study's process until it ends, so a killed runner frees nothing
# still training).
set -uo pipefail
cd "$(dirname "$0")/../.."
queue=$1
while IFS= read -r line; do
  [[ -z "$line" || "$line" == \#* ]] && continue
  out=${line%% *}; args=${line#* }
  if [[ -f "$out/report.md" && -f "$out/study.json" ]]; then echo "done: $out"; continue; fi
  mkdir -p "$out"
  exec 9>"$out/.queue-lock"
  if ! flock -n 9; then echo "taken: $out"; exec 9>&-; continue; fi
  echo "$(date -u +%FT%TZ) start: $out"
  eval nice -n 10 .venv/bin/mecheval study $args --scale "${SCALE:-paper}" --early-stop --workers 1 --quiet --out "$out" \
    || echo "$(date -u +%FT%TZ) FAILED: $out"
  exec 9>&-
  echo "$(date -u +%FT%TZ) end: $out"
done < "$queue"
