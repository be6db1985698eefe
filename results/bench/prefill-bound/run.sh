#!/usr/bin/env bash
# bash results/bench/prefill-bound/run.sh: the one-core bounds (bound.cpp) alone and on both cores at once, the ops'
# products (products.py), the model's prefill profile (prefill_profile.py), then an sr-rag-choose eval with its
# prefill and decode time (eval_timing.py).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
bin=$(mktemp -d)/bound
g++ -O3 -std=c++17 -mavx512f -mavx512bw -mavx512vnni -mavx512vl -mavx512dq "$here/bound.cpp" -o "$bin"
echo "## one core"; "$bin"
echo "## both cores at once"; "$bin" > "$bin.1" & "$bin" > "$bin.2"; wait; cat "$bin.1" "$bin.2"
echo "## the packed products through the ops (GMAC/s)"; .venv/bin/python "$here/products.py"
echo "## the model's prefill"; HF_HUB_OFFLINE=1 .venv/bin/python "$here/prefill_profile.py"
echo "## sr-rag-choose, 24 HotpotQA questions, batch 8"
out=$(mktemp -d)
HF_HUB_OFFLINE=1 .venv/bin/python "$here/eval_timing.py" eval --dataset hotpotqa --model qwen2.5-coder-1.5b \
  --weights mixed --methods sr-rag-choose --limit 24 --batch-size 8 --threads 2 --out "$out" 2>&1 | grep -E "TIMING|^\| sr-rag-choose \| [0-9]"
