// Shared by the vector paths (simd.cpp: AVX2 and AVX-VNNI; simd_avx512.cpp: AVX512-VNNI): the target attributes and
// the helpers every path uses to read a tile. x86-64 only.
#pragma once

#include "kernels.h"

#if AR_X86
#include <cstring>

namespace active_rag_kernels {

#define AR_AVX2 __attribute__((target("avx2,fma,f16c")))
#define AR_AVXVNNI __attribute__((target("avx2,fma,f16c,avxvnni")))
#define AR_AVX512 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vnni")))

// Holds an accumulator in a register at this point of the loop. Integer sums are associative, and GCC 12 reorders
// an AVX2 tile's chain of 16-bit adds into a tree after all of a group's products: at 4 rows their 32 partial products
// did not fit the 16 vector registers and about 40 went through the stack a group (int4 at 4 rows, one Zen 2 core in
// L1: 53 -> 63 MAC/ns with the chain kept; results/bench/prefill-avx2/README.md). The sums are the same either way.
#define AR_KEEP(v) asm("" : "+x"(v))

inline int32_t load4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// int5 (F = true): a group's fifth bits, eight 64-bit masks after its four chunks of nibbles (layout.pack_int5); mask
// 2c + h covers the low (h = 0) or high (h = 1) nibbles of chunk c, bit 4 * lane + i for byte 4 * lane + i.
inline uint64_t load_mask(const uint8_t* group, int m) {
  uint64_t v;
  std::memcpy(&v, group + 4 * kChunk + 8 * m, sizeof v);
  return v;
}

// 32 mask bits -> 32 bytes, `value` where the bit is set (byte j: bit j), 0 elsewhere: the fifth bit's value (16), or
// int6's sixth (32).
AR_AVX2 inline __m256i mask_bytes(uint32_t bits, int8_t value) {
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                          3, 3, 3, 3, 3, 3);
  const __m256i select = _mm256_set1_epi64x(int64_t(0x8040201008040201ull));
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(bits)), spread);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, select), select), _mm256_set1_epi8(value));
}

// Bytes per group of a tile: four chunks of nibbles, and for int5 a fifth of masks.
template <bool F>
constexpr int64_t group_bytes() {
  return (F ? 5 : 4) * kChunk;
}

// Software prefetch. A step reads each weight once, from memory, and the hardware prefetchers alone kept the 2-thread
// kernels at 10-13 GB/s of a 21 GB/s machine: each tile's loop asks for the group about kPrefetchBytes ahead of the one
// it reads (a tile's later groups, then the next tile's: a thread's tiles are contiguous). Prefetching past the end of
// the weights is harmless (a prefetch never faults). Distances of 1-8 KB were measured (results/bench/prefetch).
constexpr int64_t kPrefetchBytes = 4096;

inline void prefetch(const void* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(static_cast<const char*>(p) + o, _MM_HINT_T0);
}

// A group of `bytes` and its scales' `scale_bytes`, kPrefetchBytes ahead in whole groups.
inline void prefetch_ahead(const uint8_t* group, int64_t bytes, const void* scales, int64_t scale_bytes) {
  const int64_t ahead = kPrefetchBytes / bytes;
  prefetch(group + ahead * bytes, bytes);
  if (scales != nullptr) prefetch(static_cast<const uint8_t*>(scales) + ahead * scale_bytes, scale_bytes);
}

// Where group g's scales are, for the prefetch: 64 bytes a group of bfloat16 steps and zeros, or (K: Q4_K's scales,
// kernels.h) 40 a group on average.
template <bool K>
inline const void* scales_at(const uint16_t* sc, int64_t g) {
  return K ? static_cast<const void*>(reinterpret_cast<const uint8_t*>(sc) + g * (kSuperBytes / kSuperGroups))
           : static_cast<const void*>(sc + g * 32);
}

template <bool K>
constexpr int64_t scale_bytes() {
  return K ? kSuperBytes / kSuperGroups : 64;
}

// The AVX512-VNNI paths' tables (simd_avx512.cpp): 1 to 8 rows a pass.
Plan<Int4Fn> avx512_int4_plan(bool five);
Plan<Int4Fn> avx512_int4k_plan();
Plan<Int8Fn> avx512_int8_plan();

}  // namespace active_rag_kernels
#endif  // AR_X86
