// One core running the AVX2 tile functions of active_rag/kernels/csrc/simd.cpp over L1-resident weights and
// activations (argument: groups of 32 inputs), MACs a nanosecond at 1, 2 and 4 rows; with a second argument `avx512`,
// the AVX512-VNNI ones of simd_avx512.cpp at 1, 2, 4 and 8 rows. Built by l1_loop.sh.
#include "kernels.h"
#include "simd.h"
#include <cstring>
#include <chrono>
#include <cstdio>
#include <vector>
#include <cstdlib>
using namespace active_rag_kernels;
int main(int argc, char** argv) {
  const int64_t groups = argc > 1 ? atol(argv[1]) : 8, k = groups * kGroup, rows = 8;
  const bool avx512 = argc > 2 && std::strcmp(argv[2], "avx512") == 0;
  std::vector<uint8_t> tile(groups * 8 * kChunk);  // int8 size (and an expanded int5 tile's); int4/int5 use less
  for (auto& b : tile) b = rand();
  std::vector<uint16_t> sc(groups * 32, 0x3c00);
  std::vector<float> s8(16, 1.0f);
  std::vector<int8_t> xq(rows * k);
  for (auto& b : xq) b = int8_t(rand() % 255 - 127);
  std::vector<float> sx(rows * groups, 1.0f), sums(rows * groups, 1.0f);
  std::vector<int32_t> start(rows * groups, 0);
  Activations a; a.xq = xq.data(); a.sx = sx.data(); a.sums = sums.data(); a.start = start.data(); a.kp = k; a.groups = groups;
  std::vector<float> out(rows * 16);
  auto run = [&](const char* name, auto fn, auto scales, int r) {
    const long iters = 4000000 / groups;
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      for (long i = 0; i < iters; ++i) fn(tile.data(), scales, groups, a, 0, r, out.data(), 16, 16);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%-14s R=%d: %.1f MAC/ns (one core, weights in L1)\n", name, r, double(iters) * r * 16 * k / best / 1e9);
  };
  if (avx512) {
    for (int r : {1, 2, 4, 8}) {
      run("int4 avx512", avx512_int4_plan(false).table[r - 1], sc.data(), r);
      run("int5 avx512", avx512_int4_plan(true).table[r - 1], sc.data(), r);
      run("int8 avx512", avx512_int8_plan().table[r - 1], s8.data(), r);
    }
    return 0;
  }
  for (int r : {1, 2, 4}) {
    run("int4 avx2", simd_int4_plan(kAvx2).table[r - 1], sc.data(), r);
    run("int5 avx2", simd_int5_plan(kAvx2).table[r - 1], sc.data(), r);
    run("int8 avx2", simd_int8_plan(kAvx2).table[r - 1], s8.data(), r);
    const Plan<Int4Fn> five = simd_int5_plan(kAvx2);  // a prefill's int5 tile, expanded once (run_tiles)
    std::vector<uint8_t> codes(groups * five.group_bytes);
    five.expand(tile.data(), groups, codes.data());
    std::swap(tile, codes);
    run("int5 expanded", five.expanded[r - 1], sc.data(), r);
    std::swap(tile, codes);
  }
}
