#!/usr/bin/env bash
# The k-quant layers' evaluation rows (results/bench/kquants/README.md), each twice: with them and with
# ACTIVE_RAG_KQUANTS=off (the layouts before, resumed from their own engine keys). Then agreement.py.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1
E=".venv/bin/active-rag eval --dataset hotpotqa --weights mixed --batch-size 8 --threads 2"
for mode in on off; do
  out=results/eval-weights-kquants; env=()
  if [ "$mode" = off ]; then out=results/eval-weights-kquants-off; env=(ACTIVE_RAG_KQUANTS=off); fi
  env "${env[@]}" $E --model qwen2.5-coder-0.5b --methods sr-rag,flare --limit 20 --out "$out"
  env "${env[@]}" $E --model qwen2.5-coder-1.5b --methods sr-rag --limit 50 --out "$out"
done
.venv/bin/python results/bench/kquants/agreement.py
