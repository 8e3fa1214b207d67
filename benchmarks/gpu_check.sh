#!/bin/bash
# Issue 32's GPU check as one prepared script, for a lent GPU machine (its python3 holds a CUDA torch):
#   1. benchmarks/device_throughput.py: steps/s on the GPU, alone and shared by k processes, against one
#      CPU core of the same machine;
#   2. AR studies trained on the GPU, several runs sharing it (`--workers` with `device: auto`): twins of
#      committed CPU runs (attention d = 64 and 128, DeltaNet d = 64, lr 1e-3), and attention at d = 256;
#      each study under a wall-clock limit (SIGINT: the run checkpoints and stops);
#   3. the studies, less checkpoints and snapshots, packed into OUT in pieces of 15 MB.
# usage: [SKIP_THROUGHPUT=1] benchmarks/gpu_check.sh OUT [STUDY_SECONDS]   (PYTHONPATH must reach mecheval and its needs)
set -u
out=$1 budget=${2:-330}
export PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -c "import torch, numba, pydantic, mecheval; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" || exit 1
start=$(date +%s)
[ -n "${SKIP_THROUGHPUT:-}" ] || (cd benchmarks && timeout -k 10 170 python3 device_throughput.py --mixers attention --mixers mamba --share 4 --seconds 5 --json "$out/throughput.json") 2>&1 | tee "$out/throughput.txt"
echo "throughput: $(( $(date +%s) - start )) s"
s=$out/studies
mkdir -p "$s"
study() {
  local name=$1; shift
  timeout -s INT -k 25 "$budget" python3 -m mecheval.cli study "$@" --scale paper --early-stop --out "$s/$name" -q > "$s/$name.log" 2>&1
  echo "$name rc=$? after $(( $(date +%s) - start )) s"
}
study attention-twins ar-architectures --widths 64,128 --lrs 1e-3 --archs attention --workers 2 &
study deltanet-twin ar-architectures --widths 64 --lrs 1e-3 --archs deltanet --workers 1 &
study d256-attention ar-architectures --widths 256 --lrs 1e-3 --archs attention --workers 1 &
wait
nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv
(cd "$out" && tar cf - --exclude checkpoint.safetensors --exclude snapshots studies | gzip -1 | split -b 15M - studies.tgz.part-) && rm -rf "$s"
ls -la "$out"
