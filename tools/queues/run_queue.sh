#!/usr/bin/env bash
# Runs a queue file's studies one after another (one line: OUT_DIR then the `mecheval study` arguments),
# niced, one worker each; a finished study (its report.md newer than its sweep) is skipped, an unfinished
# one resumes. Usage: tools/queues/run_queue.sh tools/queues/issue53-a.txt; SCALE=cpu for a queue of cpu-scale
# studies (default: paper). Two runners of one queue fill two cores: each takes the next study the other does not
# hold (an flock on OUT_DIR/.queue-lock, held by the study's process until it ends, so a killed runner frees nothing
# still training). The file is read afresh after each study, from its top: lines may be added, moved or edited
# anywhere while a runner works (tests/study/test_queues.py checks every line); a study that failed is not retried
# by the same runner. MECHEVAL: the mecheval command (default .venv/bin/mecheval).
set -uo pipefail
cd "$(dirname "$0")/../.."
queue=$1
failed=" " scan=0
while :; do
  ran=0 scan=$((scan + 1))
  while IFS= read -r line; do
    [[ -z "$line" || "$line" == \#* ]] && continue
    out=${line%% *}; args=${line#* }
    [[ "$failed" == *" $out "* ]] && continue
    if [[ -f "$out/report.md" && -f "$out/study.json" ]]; then ((scan == 1)) && echo "done: $out"; continue; fi
    mkdir -p "$out"
    exec 9>"$out/.queue-lock"
    if ! flock -n 9; then ((scan == 1)) && echo "taken: $out"; exec 9>&-; continue; fi
    echo "$(date -u +%FT%TZ) start: $out"
    if ! eval nice -n 10 "${MECHEVAL:-.venv/bin/mecheval}" study $args --scale "${SCALE:-paper}" --early-stop --workers 1 --quiet \
        --out "$out" </dev/null; then
      echo "$(date -u +%FT%TZ) FAILED: $out"; failed+="$out "
    fi
    exec 9>&-
    echo "$(date -u +%FT%TZ) end: $out"
    ran=1
    break
  done < "$queue"
  ((ran)) || break
done
