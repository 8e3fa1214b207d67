#!/bin/bash
# Issue 54 item 6 as one prepared command for a lent GPU machine (its python3 holds a CUDA torch), within one call:
#   1. benchmarks/cohort.py: model-steps/s of cohorts of K = 1, 16, 64, 256 (vmap) against solo runs trained just
#      before and after each, attention and Mamba at d = 64 (OUT/cohort-bench.md);
#   2. benchmarks/gpu_grid.py train: the published AR grid as cohorts (the zoo, d = 16-128, 7 rates, 3 seeds) in
#      GRID until BUDGET - READ_S - PACK_S seconds after the start (SIGINT: every run checkpoints), resumed by the
#      next call on the same machine (GRID lies in the ignored out/);
#   3. gpu_grid.py read: the readouts and report of the runs finished so far, for at most READ_S seconds;
#   4. gpu_grid.py pack: their tables, verdict inputs and best-rate weights into OUT (grid.tgz.part-*, manifest).
# usage: [REHEARSE=1] [BUDGET=540] [BENCH_S=150] [READ_S=90] [PACK_S=30] [GRID=out/gpu-grid] [PYTHON=python3]
#        benchmarks/gpu_grid.sh OUT [gpu_grid.py grid options: --archs --widths --lrs --seeds --cohort --workers]
# REHEARSE=1: every stage tiny (cohorts of 1 and 2 for 5 steps; the grid: attention and Mamba, d = 16, lr 1e-3 and
# 3e-3, seed 0, 50 steps, cohorts of 2), to rehearse on a CPU: `REHEARSE=1 BUDGET=400 nice -n 10 benchmarks/gpu_grid.sh DIR`.
set -u
out=$1; shift
start=$(date +%s) budget=${BUDGET:-540} py=${PYTHON:-python3} grid=${GRID:-out/gpu-grid}
export PYTHONUNBUFFERED=1
left() { local s=$(( budget - ($(date +%s) - start) - $1 )); echo $(( s > 1 ? s : 1 )); }
mkdir -p "$out" "$(dirname "$grid")"
exec > >(tee -a "$out/gpu-grid.log") 2>&1
nvidia-smi -L 2>/dev/null || echo "no GPU: a rehearsal on $(nproc) CPU cores"
$py -c "import torch, mecheval; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" || exit 1
if [ -n "${REHEARSE:-}" ]; then
  bench=(--archs attention,mamba --ks 1,2 --engines loop,vmap --steps 5 --pool 64)
  set -- --archs attention,mamba --widths 16 --lrs 1e-3,3e-3 --seeds 0 --cohort 2 --rehearse "$@"
else
  bench=(--archs attention,mamba --ks 1,16,64,256 --engines vmap --steps 30)
fi
timeout -k 10 "${BENCH_S:-150}" $py benchmarks/cohort.py "${bench[@]}" | tee "$out/cohort-bench.md"
echo "bench: $(( $(date +%s) - start )) s"
timeout -s INT -k 30 "$(left $(( ${READ_S:-90} + ${PACK_S:-30} )))" $py benchmarks/gpu_grid.py train "$grid" "$@"
echo "train: rc $? after $(( $(date +%s) - start )) s"
timeout -s INT -k 10 "$(left "${PACK_S:-30}")" $py benchmarks/gpu_grid.py read "$grid" "$@"
echo "read: rc $? after $(( $(date +%s) - start )) s"
$py benchmarks/gpu_grid.py pack "$grid" "$out"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv
echo "done after $(( $(date +%s) - start )) s"; ls -la "$out"
