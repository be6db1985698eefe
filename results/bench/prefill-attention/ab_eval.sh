#!/usr/bin/env bash
# Alternating sr-rag-choose runs on the 1.5B: the model's sdpa call for a prompt after a cached prefix
# (ACTIVE_RAG_PREFILL_ATTENTION=sdpa) against the chunks of active_rag/decoding/prefill_attention.py, 3 rounds;
# rows under /tmp/ab-*/, one line a run on stdout. Run from anywhere: bash results/bench/prefill-attention/ab_eval.sh
cd "$(dirname "$0")/../../.."
for round in 1 2 3; do
  for v in sdpa chunked; do
    rm -rf /tmp/ab-$v-$round
    if [ $v = sdpa ]; then export ACTIVE_RAG_PREFILL_ATTENTION=sdpa; else unset ACTIVE_RAG_PREFILL_ATTENTION; fi
    HF_HUB_OFFLINE=1 /usr/bin/time -v .venv/bin/active-rag eval --dataset hotpotqa --model qwen2.5-coder-1.5b --weights mixed --methods sr-rag-choose --limit 24 --batch-size 8 --threads 2 --out /tmp/ab-$v-$round > /tmp/ab-$v-$round.log 2>&1
    echo "round $round $v: $(tr '\r' '\n' < /tmp/ab-$v-$round.log | grep '^| sr-rag-choose' | head -1 | awk -F'|' '{print "s/q", $17, "F1", $4}') wall $(grep Elapsed /tmp/ab-$v-$round.log | awk '{print $NF}') rss_kb $(grep Maximum /tmp/ab-$v-$round.log | awk '{print $NF}')"
  done
done
