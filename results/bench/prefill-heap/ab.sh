#!/usr/bin/env bash
# Alternate processes with glibc's heap thresholds and the held heap: bash results/bench/prefill-heap/ab.sh ROUNDS
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PYTHON:-.venv/bin/python}
for round in $(seq "${1:-2}"); do
  for model in qwen2.5-coder-1.5b qwen2.5-coder-0.5b; do
    for heap in glibc hold; do
      ACTIVE_RAG_HEAP=$heap "$PY" results/bench/prefill-heap/prefill.py "$model" 2>&1 | grep 'prefill tok/s'
    done
  done
done
