#!/usr/bin/env bash
# Lands the finished queue studies into main: each study under SRC/results with a report.md and a study.json that main
# has not committed. SRC is a worktree the queues ran in (so that edits to src/ do not reach a running study) or, by
# default, main itself. Copies leave out what .gitignore does not already (run-level readout PNGs: the study's figures/
# keeps the copies its report shows; the error.log of a finished run (an earlier, resumed attempt) or of a diverged one
# (its diverged.json is the record)); then archives logs,
# relabels by main's rules and drops the weights no finding reads. A study in main that has not ended (its
# study.running.json) has its finished runs' logs compressed and staged with its sweep files and marker (a run not
# read to its verdict yet: its training files only), so that a machine cut off loses none of them (the pages leave
# the study out until it ends). Usage: bash tools/queues/land.sh [SRC]
# (MECHEVAL: the mecheval command, default .venv/bin/mecheval). LEAN=1, once a round's size budget is spent
# (docs/development.md): each study landed gets a .gitignore that keeps its figures, its runs' metrics logs and their
# weights on this machine and out of the commit (the tables and verdicts the pages read are committed as ever, and
# each run's summary.json keeps the digest that `mecheval reproduce RUN --restore` rebuilds its weights against).
main=$(cd "$(dirname "$0")/../.." && pwd)
src=$(cd "${1:-$main}" && pwd)
cd "$main"
mecheval=${MECHEVAL:-.venv/bin/mecheval}
lean() {  # $1: a study directory; under LEAN=1, what the commit leaves out of it (a .gitignore it carries), where
  # nothing of it is committed yet (a study landed in part before keeps the rule it was landed by)
  [[ -n ${LEAN:-} && -z $(git ls-files "$1") ]] && printf '%s\n' "# landed lean (LEAN=1, tools/queues/land.sh): kept on the machine that trained it" \
    figures/ 'runs/*/metrics.jsonl.gz' 'runs/*/model.safetensors' > "$1/.gitignore"
  return 0
}
for d in $(cd "$src" && ls -d results/*/*/ | sed 's#/$##'); do
  if [[ $src == "$main" && -f $d/study.running.json && ! ( $d/study.running.json -ot $d/study.json ) ]]; then
    done=$(for r in "$d"/runs/*/; do [[ -f $r/summary.json || -f $r/diverged.json ]] && echo "${r%/}"; done)
    [[ -z $done ]] && continue
    for r in $done; do rm -f "$r"/error.log "$r"/interventions/*.png; done
    "$mecheval" archive-logs "$d" > /dev/null
    lean "$d"
    git add "$d"/sweep*.yaml "$d/study.running.json" $([[ -f $d/.gitignore ]] && echo "$d/.gitignore")
    for r in $done; do  # a run read to its verdict whole; one not yet read (or read partway): what training wrote
      if [[ -f $r/verdict.json ]]; then git add "$r"; else
        for f in config.yaml run.json summary.json diverged.json metrics.jsonl.gz model.safetensors; do
          [[ -f $r/$f ]] && ! git check-ignore -q "$r/$f" && git add "$r/$f"; done; fi
    done
    echo "staged $(echo "$done" | wc -l) finished run(s) of $d (not ended)"
    continue
  fi
  [[ -f $src/$d/report.md && -f $src/$d/study.json ]] || continue
  [[ -f $d/study.running.json && $d/study.running.json -ot $d/study.json ]] && rm -f "$d/study.running.json"  # left by a mecheval from before the marker was removed at the end
  [[ -n $(git ls-files "$d/study.json") ]] && continue
  if [[ $src != "$main" ]]; then
    [[ -d $d ]] && continue
    mkdir -p "$d" && (cd "$src/$d" && tar cf - --exclude=snapshots --exclude=checkpoint.safetensors --exclude=worker.json \
      --exclude=.lock --exclude=report.html .) | (cd "$d" && tar xf -)
  fi
  rm -f "$d"/runs/*/interventions/*.png
  for log in "$d"/runs/*/error.log; do [[ -f $(dirname "$log")/summary.json || -f $(dirname "$log")/diverged.json ]] && rm -f "$log"; done
  "$mecheval" archive-logs "$d" > /dev/null
  lean "$d"
  "$mecheval" relabel "$d" --recheck > /dev/null 2>&1 || echo "relabel failed: $d"
  PYTHONPATH=tools .venv/bin/python -m landing.drop_uncited_weights "$d" || echo "weights kept: $d"
  echo "landed $d"
done
