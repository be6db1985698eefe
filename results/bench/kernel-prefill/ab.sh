#!/usr/bin/env bash
# The engine's prefill of a 939-token prompt (../amx-prefill/measure_prefill.py) with ACTIVE_RAG_PREFILL=dense and
# =kernel, alternating, ROUNDS times: as this CPU is, and held below AMX (ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16).
#   bash results/bench/kernel-prefill/ab.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1
for r in $(seq "${1:-2}"); do
  for m in qwen2.5-coder-1.5b qwen2.5-coder-0.5b; do for p in dense kernel; do
    echo -n "no-AMX $p "; ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 ACTIVE_RAG_PREFILL=$p .venv/bin/python results/bench/amx-prefill/measure_prefill.py $m | tail -1
  done; done
  for p in dense kernel; do
    echo -n "AMX $p "; ACTIVE_RAG_PREFILL=$p .venv/bin/python results/bench/amx-prefill/measure_prefill.py qwen2.5-coder-1.5b | tail -1
  done
done
