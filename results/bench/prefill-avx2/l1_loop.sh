#!/usr/bin/env bash
# Build and run l1_loop.cpp against the repository's simd.cpp, with kernels.h's torch types stubbed (the tile
# functions use none of them): bash results/bench/prefill-avx2/l1_loop.sh [GROUPS] [avx512]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
csrc="$here/../../../active_rag/kernels/csrc"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed -e 's|#include <ATen/ATen.h>|namespace at { struct BFloat16 { unsigned short x; BFloat16() = default; BFloat16(float) : x(0) {} }; struct Tensor {}; }|' \
    -e 's|#include <c10/util/BFloat16.h>|namespace c10 { template <class T> struct optional {}; }|' "$csrc/kernels.h" > "$tmp/kernels.h"
cp "$csrc/simd.cpp" "$csrc/simd_avx512.cpp" "$csrc/simd.h" "$tmp/"
g++ -O3 -std=c++17 -ffp-contract=off -w -I"$tmp" -o "$tmp/l1_loop" "$here/l1_loop.cpp" "$tmp/simd.cpp" "$tmp/simd_avx512.cpp"
taskset -c 0 "$tmp/l1_loop" "${1:-48}" ${2:-}
