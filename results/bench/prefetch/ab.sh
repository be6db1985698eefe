#!/usr/bin/env bash
# Alternate two builds of the kernels' vector paths in back-to-back processes:
#   bash results/bench/prefetch/ab.sh BASE_COMMIT [ROUNDS]
# "base" is simd.cpp at BASE_COMMIT, "new" the working tree's; each is built once (cached by its sources' hash).
# Prints the kernels' GB/s and the engine's batch-1 step (measure_step.py) for both models, then restores the file.
set -euo pipefail
cd "$(dirname "$0")/../../.."
base=$1; rounds=${2:-3}
f=active_rag/kernels/csrc/simd.cpp
tmp=$(mktemp -d); cp $f "$tmp/new.cpp"; git show "$base:$f" > "$tmp/base.cpp"
trap 'cp "$tmp/new.cpp" $f' EXIT
export OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1
for v in base new; do cp "$tmp/$v.cpp" $f; .venv/bin/python -m active_rag.kernels.build > /dev/null; done
for r in $(seq "$rounds"); do for v in base new; do
  cp "$tmp/$v.cpp" $f; .venv/bin/python results/bench/prefetch/measure_kernels.py "$v"
done; done
for m in qwen2.5-coder-0.5b qwen2.5-coder-1.5b; do for r in $(seq "$rounds"); do for v in base new; do
  cp "$tmp/$v.cpp" $f; echo -n "$v "; .venv/bin/python results/bench/amx-prefill/measure_step.py $m 4 | tail -1
done; done; done
