// The vector paths of active-rag's decode kernels: AVX2 (vpmaddubsw + vpmaddwd), AVX-VNNI and AVX512-VNNI
// (vpdpbusd), each function compiled for its instruction set by a target attribute (the file itself for generic
// x86-64), chosen at run time by decode_kernel.cpp. Each computes the scalar reference's integers and float
// operations in its order, so every path's outputs are bit-identical.

#include "kernels.h"

#include <cstring>
#include <type_traits>

namespace active_rag_kernels {

#if AR_X86
#define AR_AVX2 __attribute__((target("avx2,fma")))
#define AR_AVXVNNI __attribute__((target("avx2,fma,avxvnni")))
#define AR_AVX512 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vnni")))

static inline int32_t load4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// int5 (F = true): a group's fifth bits, eight 64-bit masks after its four chunks of nibbles (layout.pack_int5); mask
// 2c + h covers the low (h = 0) or high (h = 1) nibbles of chunk c, bit 4 * lane + i for byte 4 * lane + i.
static inline uint64_t load_mask(const uint8_t* group, int m) {
  uint64_t v;
  std::memcpy(&v, group + 4 * kChunk + 8 * m, sizeof v);
  return v;
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

static inline void prefetch(const void* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(static_cast<const char*>(p) + o, _MM_HINT_T0);
}

// A group of `bytes` and its scales' `scale_bytes`, kPrefetchBytes ahead in whole groups.
static inline void prefetch_ahead(const uint8_t* group, int64_t bytes, const void* scales, int64_t scale_bytes) {
  const int64_t ahead = kPrefetchBytes / bytes;
  prefetch(group + ahead * bytes, bytes);
  if (scales != nullptr) prefetch(static_cast<const uint8_t*>(scales) + ahead * scale_bytes, scale_bytes);
}

// ------------------------------------------------------------------------------------------------ AVX2, AVX-VNNI
// 8 lanes a vector: a tile is two halves (lanes 0-7, then 8-15: the first and second 32 bytes of each chunk); at most
// 4 rows a pass (16 vector registers).

AR_AVX2 static inline __m256 bf16x8(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}

AR_AVX2 static inline void store8(float* out, __m256 v, int64_t valid) {
  if (valid >= 8) {
    _mm256_storeu_ps(out, v);
  } else {
    alignas(32) float tmp[8];
    _mm256_store_ps(tmp, v);
    std::memcpy(out, tmp, size_t(valid) * sizeof(float));
  }
}

AR_AVX2 static inline __m256 load8(const float* p, int64_t valid) {
  if (valid >= 8) return _mm256_loadu_ps(p);
  alignas(32) float tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(tmp, p, size_t(valid) * sizeof(float));
  return _mm256_load_ps(tmp);
}

// 32 mask bits -> 32 bytes, 16 where the bit is set (byte j: bit j), 0 elsewhere: the fifth bit's value.
AR_AVX2 static inline __m256i fifth_bits(uint32_t bits) {
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                          3, 3, 3, 3, 3, 3);
  const __m256i select = _mm256_set1_epi64x(int64_t(0x8040201008040201ull));
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(bits)), spread);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, select), select), _mm256_set1_epi8(16));
}

// The codes of chunk c's half h (lanes 8h to 8h + 7) of a group: its low and high nibbles as bytes, and for int5
// (F) their fifth bits added.
template <bool F>
AR_AVX2 static inline void int4_codes(const uint8_t* group, int c, int64_t h, __m256i& lo, __m256i& hi) {
  const __m256i nib = _mm256_set1_epi8(0x0F);
  const __m256i v = _mm256_loadu_si256((const __m256i*)(group + h * 32 + c * kChunk));
  lo = _mm256_and_si256(v, nib);
  hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
  if constexpr (F) {
    lo = _mm256_or_si256(lo, fifth_bits(uint32_t(load_mask(group, 2 * c) >> (32 * h))));
    hi = _mm256_or_si256(hi, fifth_bits(uint32_t(load_mask(group, 2 * c + 1) >> (32 * h))));
  }
}

// The int4 epilogue of a group: acc += sx * ((d - 8 S) * step + zero * S), d already holding d - 8 S.
AR_AVX2 static inline __m256 int4_fold8(__m256 acc, __m256i d, __m256 step, __m256 zero, float sum, float sx) {
  __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(d), step);
  t = _mm256_fmadd_ps(zero, _mm256_set1_ps(sum), t);
  return _mm256_fmadd_ps(t, _mm256_set1_ps(sx), acc);
}

// AVX2: u8 x s8 pairs summed in 16 bits, each chunk adding 4 products to a 16-bit sum. int4 widens once a group
// (16 products, at most 16 * 15 * 128 = 30,720 < 2^15); int5 (codes up to 31) once every two chunks (8 products, at
// most 31,744): 4 rows from L1 on one Zen 2 core, 43.5 MAC/ns against 37.4 widening every chunk.
template <int R, bool F>
AR_AVX2 static void int4_tile_avx2(const uint8_t* tile, const uint16_t* sc, int64_t groups, const Activations& a,
                                   int64_t r0, int64_t, float* out, int64_t ldo, int64_t valid) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t h = 0; h < 2 && valid > 8 * h; ++h) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      __m256i s16[R], s32[R];
      for (int r = 0; r < R; ++r) s16[r] = s32[r] = _mm256_setzero_si256();
      const uint8_t* group = tile + g * group_bytes<F>();
      const int8_t* xg = a.xq + r0 * a.kp + g * kGroup;
      prefetch_ahead(group, group_bytes<F>(), sc + g * 32, 64);
      for (int c = 0; c < 4; ++c) {
        __m256i lo, hi;
        int4_codes<F>(group, c, h, lo, hi);
        for (int r = 0; r < R; ++r) {
          const int8_t* xr = xg + r * a.kp + c * 8;
          s16[r] = _mm256_add_epi16(s16[r], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(load4(xr))));
          s16[r] = _mm256_add_epi16(s16[r], _mm256_maddubs_epi16(hi, _mm256_set1_epi32(load4(xr + 4))));
          if (F && (c & 1)) {
            s32[r] = _mm256_add_epi32(s32[r], _mm256_madd_epi16(s16[r], ones));
            s16[r] = _mm256_setzero_si256();
          }
        }
      }
      const __m256 step = bf16x8(sc + g * 32 + h * 8), zero = bf16x8(sc + g * 32 + 16 + h * 8);
      for (int r = 0; r < R; ++r) {
        const int64_t at = (r0 + r) * a.groups + g;
        const __m256i sum = F ? s32[r] : _mm256_madd_epi16(s16[r], ones);
        const __m256i d = _mm256_add_epi32(sum, _mm256_set1_epi32(a.start[at]));
        acc[r] = int4_fold8(acc[r], d, step, zero, a.sums[at], a.sx[at]);
      }
    }
    for (int r = 0; r < R; ++r) store8(out + (r0 + r) * ldo + 8 * h, acc[r], valid - 8 * h);
  }
}

template <int R, bool F>
AR_AVXVNNI static void int4_tile_avxvnni(const uint8_t* tile, const uint16_t* sc, int64_t groups, const Activations& a,
                                         int64_t r0, int64_t, float* out, int64_t ldo, int64_t valid) {
  for (int64_t h = 0; h < 2 && valid > 8 * h; ++h) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      __m256i d[R];
      for (int r = 0; r < R; ++r) d[r] = _mm256_set1_epi32(a.start[(r0 + r) * a.groups + g]);
      const uint8_t* group = tile + g * group_bytes<F>();
      const int8_t* xg = a.xq + r0 * a.kp + g * kGroup;
      prefetch_ahead(group, group_bytes<F>(), sc + g * 32, 64);
      for (int c = 0; c < 4; ++c) {
        __m256i lo, hi;
        int4_codes<F>(group, c, h, lo, hi);
        for (int r = 0; r < R; ++r) {
          const int8_t* xr = xg + r * a.kp + c * 8;
          d[r] = _mm256_dpbusd_avx_epi32(d[r], lo, _mm256_set1_epi32(load4(xr)));
          d[r] = _mm256_dpbusd_avx_epi32(d[r], hi, _mm256_set1_epi32(load4(xr + 4)));
        }
      }
      const __m256 step = bf16x8(sc + g * 32 + h * 8), zero = bf16x8(sc + g * 32 + 16 + h * 8);
      for (int r = 0; r < R; ++r) {
        const int64_t at = (r0 + r) * a.groups + g;
        acc[r] = int4_fold8(acc[r], d[r], step, zero, a.sums[at], a.sx[at]);
      }
    }
    for (int r = 0; r < R; ++r) store8(out + (r0 + r) * ldo + 8 * h, acc[r], valid - 8 * h);
  }
}

// AVX2 int8: no unsigned weights (u8 x s8 pairs would overflow 16 bits), so the signed weight's sign moves onto the
// activation and its absolute value multiplies (at most 2 * 127 * 127 a pair).
template <int R>
AR_AVX2 static void int8_tile_avx2(const uint8_t* tile, const float* scales, int64_t groups, const Activations& a,
                                   int64_t r0, int64_t, float* out, int64_t ldo, int64_t valid) {
  const __m256i flip = _mm256_set1_epi8(char(0x80)), ones = _mm256_set1_epi16(1);
  for (int64_t h = 0; h < 2 && valid > 8 * h; ++h) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      __m256i d[R];
      for (int r = 0; r < R; ++r) d[r] = _mm256_setzero_si256();
      const uint8_t* w = tile + g * 8 * kChunk + h * 32;
      const int8_t* xg = a.xq + r0 * a.kp + g * kGroup;
      prefetch_ahead(tile + g * 8 * kChunk, 8 * kChunk, nullptr, 0);
      for (int c = 0; c < 8; ++c) {
        const __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(w + c * kChunk)), flip);
        const __m256i magnitude = _mm256_abs_epi8(v);
        for (int r = 0; r < R; ++r) {
          const __m256i xs = _mm256_sign_epi8(_mm256_set1_epi32(load4(xg + r * a.kp + c * 4)), v);
          d[r] = _mm256_add_epi32(d[r], _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, xs), ones));
        }
      }
      for (int r = 0; r < R; ++r) {
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d[r]), _mm256_set1_ps(a.sx[(r0 + r) * a.groups + g]), acc[r]);
      }
    }
    const __m256 s = load8(scales + 8 * h, valid - 8 * h);
    for (int r = 0; r < R; ++r) store8(out + (r0 + r) * ldo + 8 * h, _mm256_mul_ps(acc[r], s), valid - 8 * h);
  }
}

// The int8 line paths' epilogues (both halves of R rows): a group's integer sums into the float accumulators, times
// the activations' scale; then the weights' scales and the store.
template <int R>
AR_AVX2 static inline void int8_line_fold(__m256 (&acc)[2][R], const __m256i (&d)[2][R], const Activations& a,
                                          int64_t r0, int64_t g) {
  for (int h = 0; h < 2; ++h)
    for (int r = 0; r < R; ++r)
      acc[h][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d[h][r]), _mm256_set1_ps(a.sx[(r0 + r) * a.groups + g]), acc[h][r]);
}

template <int R>
AR_AVX2 static inline void int8_line_store(const __m256 (&acc)[2][R], const float* scales, float* out, int64_t r0,
                                           int64_t ldo, int64_t valid) {
  for (int h = 0; h < 2 && valid > 8 * h; ++h) {
    const __m256 s = load8(scales + 8 * h, valid - 8 * h);
    for (int r = 0; r < R; ++r) store8(out + (r0 + r) * ldo + 8 * h, _mm256_mul_ps(acc[h][r], s), valid - 8 * h);
  }
}

// One or two rows: both halves of each 64-byte chunk in one pass over the tile, as the AVX-512 path reads it. Half by
// half (above), a decode step's pass over the second half read the tile from cache while memory idled: 21-27 GB/s on
// the 2-core EPYC where AVX-512 streamed 38-48. The same integer sums and float operations per lane as above, so the
// same outputs; the second half is computed even where only the first is stored (the tile holds whole chunks).
template <int R>
AR_AVX2 static void int8_line_avx2(const uint8_t* tile, const float* scales, int64_t groups, const Activations& a,
                                   int64_t r0, int64_t, float* out, int64_t ldo, int64_t valid) {
  const __m256i flip = _mm256_set1_epi8(char(0x80)), ones = _mm256_set1_epi16(1);
  __m256 acc[2][R];
  for (int h = 0; h < 2; ++h)
    for (int r = 0; r < R; ++r) acc[h][r] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m256i d[2][R];
    for (int h = 0; h < 2; ++h)
      for (int r = 0; r < R; ++r) d[h][r] = _mm256_setzero_si256();
    const uint8_t* w = tile + g * 8 * kChunk;
    const int8_t* xg = a.xq + r0 * a.kp + g * kGroup;
    prefetch_ahead(w, 8 * kChunk, nullptr, 0);
    for (int c = 0; c < 8; ++c) {
      for (int h = 0; h < 2; ++h) {
        const __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(w + c * kChunk + h * 32)), flip);
        const __m256i magnitude = _mm256_abs_epi8(v);
        for (int r = 0; r < R; ++r) {
          const __m256i xs = _mm256_sign_epi8(_mm256_set1_epi32(load4(xg + r * a.kp + c * 4)), v);
          d[h][r] = _mm256_add_epi32(d[h][r], _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, xs), ones));
        }
      }
    }
    int8_line_fold<R>(acc, d, a, r0, g);
  }
  int8_line_store<R>(acc, scales, out, r0, ldo, valid);
}

// One row of int4 (F: int5) with both halves of each chunk in one pass (see int8_line_avx2); int4_tile_avx2's sums,
// widening and epilogue per lane.
template <bool F>
AR_AVX2 static void int4_line_avx2(const uint8_t* tile, const uint16_t* sc, int64_t groups, const Activations& a,
                                   int64_t r0, int64_t, float* out, int64_t ldo, int64_t valid) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t g = 0; g < groups; ++g) {
    __m256i s16[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    __m256i s32[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    const uint8_t* group = tile + g * group_bytes<F>();
    const int8_t* xg = a.xq + r0 * a.kp + g * kGroup;
    prefetch_ahead(group, group_bytes<F>(), sc + g * 32, 64);
    for (int c = 0; c < 4; ++c) {
      const __m256i x_lo = _mm256_set1_epi32(load4(xg + c * 8)), x_hi = _mm256_set1_epi32(load4(xg + c * 8 + 4));
      for (int h = 0; h < 2; ++h) {
        __m256i lo, hi;
        int4_codes<F>(group, c, h, lo, hi);
        s16[h] = _mm256_add_epi16(s16[h], _mm256_maddubs_epi16(lo, x_lo));
        s16[h] = _mm256_add_epi16(s16[h], _mm256_maddubs_epi16(hi, x_hi));
        if (F && (c & 1)) {
          s32[h] = _mm256_add_epi32(s32[h], _mm256_madd_epi16(s16[h], ones));
          s16[h] = _mm256_setzero_si256();
        }
      }
    }
    const int64_t at = r0 * a.groups + g;
    for (int h = 0; h < 2; ++h) {
      const __m256 step = bf16x8(sc + g * 32 + h * 8), zero = bf16x8(sc + g * 32 + 16 + h * 8);
      const __m256i sum = F ? s32[h] : _mm256_madd_epi16(s16[h], ones);
      const __m256i d = _mm256_add_epi32(sum, _mm256_set1_epi32(a.start[at]));
      acc[h] = int4_fold8(acc[h], d, step, zero, a.sums[at], a.sx[at]);
    }
  }
  for (int h = 0; h < 2 && valid > 8 * h; ++h) store8(out + r0 * ldo + 8 * h, acc[h], valid - 8 * h);
}

template <int R>
AR_AVXVNNI static void int8_tile_avxvnni(const uint8_t* tile, const float* scales, int64_t groups, const Activations& a,
                                         int64_t r0, int64_t, float* out, int64_t ldo, int64_t valid) {
  for (int64_t h = 0; h < 2 && valid > 8 * h; ++h) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      __m256i d[R];
      for (int r = 0; r < R; ++r) d[r] = _mm256_set1_epi32(a.start[(r0 + r) * a.groups + g]);
      const uint8_t* w = tile + g * 8 * kChunk + h * 32;
      const int8_t* xg = a.xq + r0 * a.kp + g * kGroup;
      prefetch_ahead(tile + g * 8 * kChunk, 8 * kChunk, nullptr, 0);
      for (int c = 0; c < 8; ++c) {
        const __m256i v = _mm256_loadu_si256((const __m256i*)(w + c * kChunk));
        for (int r = 0; r < R; ++r) {
          d[r] = _mm256_dpbusd_avx_epi32(d[r], v, _mm256_set1_epi32(load4(xg + r * a.kp + c * 4)));
        }
      }
      for (int r = 0; r < R; ++r) {
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d[r]), _mm256_set1_ps(a.sx[(r0 + r) * a.groups + g]), acc[r]);
      }
    }
    const __m256 s = load8(scales + 8 * h, valid - 8 * h);
    for (int r = 0; r < R; ++r) store8(out + (r0 + r) * ldo + 8 * h, _mm256_mul_ps(acc[r], s), valid - 8 * h);
  }
}

// AVX-VNNI, one or two rows (int8) or one row (int4, int5): both halves of each chunk in one pass, as int8_line_avx2
// reads them, with int8_tile_avxvnni's and int4_tile_avxvnni's integer sums and epilogues per lane, so the same outputs.
template <int R>
AR_AVXVNNI static void int8_line_avxvnni(const uint8_t* tile, const float* scales, int64_t groups, const Activations& a,
                                         int64_t r0, int64_t, float* out, int64_t ldo, int64_t valid) {
  __m256 acc[2][R];
  for (int h = 0; h < 2; ++h)
    for (int r = 0; r < R; ++r) acc[h][r] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m256i d[2][R];
    for (int r = 0; r < R; ++r) d[0][r] = d[1][r] = _mm256_set1_epi32(a.start[(r0 + r) * a.groups + g]);
    const uint8_t* w = tile + g * 8 * kChunk;
    const int8_t* xg = a.xq + r0 * a.kp + g * kGroup;
    prefetch_ahead(w, 8 * kChunk, nullptr, 0);
    for (int c = 0; c < 8; ++c) {
      __m256i x[R];
      for (int r = 0; r < R; ++r) x[r] = _mm256_set1_epi32(load4(xg + r * a.kp + c * 4));
      for (int h = 0; h < 2; ++h) {
        const __m256i v = _mm256_loadu_si256((const __m256i*)(w + c * kChunk + h * 32));
        for (int r = 0; r < R; ++r) d[h][r] = _mm256_dpbusd_avx_epi32(d[h][r], v, x[r]);
      }
    }
    int8_line_fold<R>(acc, d, a, r0, g);
  }
  int8_line_store<R>(acc, scales, out, r0, ldo, valid);
}

template <bool F>
AR_AVXVNNI static void int4_line_avxvnni(const uint8_t* tile, const uint16_t* sc, int64_t groups, const Activations& a,
                                         int64_t r0, int64_t, float* out, int64_t ldo, int64_t valid) {
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t at = r0 * a.groups + g;
    __m256i d[2] = {_mm256_set1_epi32(a.start[at]), _mm256_set1_epi32(a.start[at])};
    const uint8_t* group = tile + g * group_bytes<F>();
    const int8_t* xg = a.xq + r0 * a.kp + g * kGroup;
    prefetch_ahead(group, group_bytes<F>(), sc + g * 32, 64);
    for (int c = 0; c < 4; ++c) {
      const __m256i x_lo = _mm256_set1_epi32(load4(xg + c * 8)), x_hi = _mm256_set1_epi32(load4(xg + c * 8 + 4));
      for (int h = 0; h < 2; ++h) {
        __m256i lo, hi;
        int4_codes<F>(group, c, h, lo, hi);
        d[h] = _mm256_dpbusd_avx_epi32(d[h], lo, x_lo);
        d[h] = _mm256_dpbusd_avx_epi32(d[h], hi, x_hi);
      }
    }
    for (int h = 0; h < 2; ++h) {
      const __m256 step = bf16x8(sc + g * 32 + h * 8), zero = bf16x8(sc + g * 32 + 16 + h * 8);
      acc[h] = int4_fold8(acc[h], d[h], step, zero, a.sums[at], a.sx[at]);
    }
  }
  for (int h = 0; h < 2 && valid > 8 * h; ++h) store8(out + r0 * ldo + 8 * h, acc[h], valid - 8 * h);
}

// ------------------------------------------------------------------------------------------------ AVX512-VNNI
// 16 lanes a vector (a whole tile); at most 8 rows a pass (32 vector registers).

AR_AVX512 static inline __m512 bf16x16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}

AR_AVX512 static inline __mmask16 lanes(int64_t valid) {
  return valid >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << valid) - 1u);
}

template <int R, bool F>
AR_AVX512 static void int4_tile_avx512(const uint8_t* tile, const uint16_t* sc, int64_t groups, const Activations& a,
                                       int64_t r0, int64_t, float* out, int64_t ldo, int64_t valid) {
  const __m512i nib = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    // two chains of sums a row (low and high nibbles): one chain of 8 dependent vpdpbusd would bound a single row by
    // the instruction's latency; the integers are exact, so the split changes no result
    __m512i d[R], e[R];
    for (int r = 0; r < R; ++r) {
      d[r] = _mm512_set1_epi32(a.start[(r0 + r) * a.groups + g]);
      e[r] = _mm512_setzero_si512();
    }
    const uint8_t* w = tile + g * group_bytes<F>();
    const int8_t* xg = a.xq + r0 * a.kp + g * kGroup;
    prefetch_ahead(w, group_bytes<F>(), sc + g * 32, 64);
    for (int c = 0; c < 4; ++c) {
      const __m512i v = _mm512_loadu_si512(w + c * kChunk);
      __m512i lo = _mm512_and_si512(v, nib), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
      if constexpr (F) {
        // the fifth bits: 16 added to the bytes whose mask bit is set, the mask loaded into a mask register
        lo = _mm512_mask_add_epi8(lo, _cvtu64_mask64(load_mask(w, 2 * c)), lo, sixteen);
        hi = _mm512_mask_add_epi8(hi, _cvtu64_mask64(load_mask(w, 2 * c + 1)), hi, sixteen);
      }
      for (int r = 0; r < R; ++r) {
        const int8_t* xr = xg + r * a.kp + c * 8;
        d[r] = _mm512_dpbusd_epi32(d[r], lo, _mm512_set1_epi32(load4(xr)));
        e[r] = _mm512_dpbusd_epi32(e[r], hi, _mm512_set1_epi32(load4(xr + 4)));
      }
    }
    const __m512 step = bf16x16(sc + g * 32), zero = bf16x16(sc + g * 32 + 16);
    for (int r = 0; r < R; ++r) {
      const int64_t at = (r0 + r) * a.groups + g;
      __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(d[r], e[r])), step);
      t = _mm512_fmadd_ps(zero, _mm512_set1_ps(a.sums[at]), t);
      acc[r] = _mm512_fmadd_ps(t, _mm512_set1_ps(a.sx[at]), acc[r]);
    }
  }
  const __mmask16 m = lanes(valid);
  for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(out + (r0 + r) * ldo, m, acc[r]);
}

template <int R>
AR_AVX512 static void int8_tile_avx512(const uint8_t* tile, const float* scales, int64_t groups, const Activations& a,
                                       int64_t r0, int64_t, float* out, int64_t ldo, int64_t valid) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i d[R];
    for (int r = 0; r < R; ++r) d[r] = _mm512_set1_epi32(a.start[(r0 + r) * a.groups + g]);
    const uint8_t* w = tile + g * 8 * kChunk;
    const int8_t* xg = a.xq + r0 * a.kp + g * kGroup;
    prefetch_ahead(w, 8 * kChunk, nullptr, 0);
    for (int c = 0; c < 8; ++c) {
      const __m512i v = _mm512_loadu_si512(w + c * kChunk);
      for (int r = 0; r < R; ++r) d[r] = _mm512_dpbusd_epi32(d[r], v, _mm512_set1_epi32(load4(xg + r * a.kp + c * 4)));
    }
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[r]), _mm512_set1_ps(a.sx[(r0 + r) * a.groups + g]), acc[r]);
    }
  }
  const __mmask16 m = lanes(valid);
  const __m512 s = _mm512_maskz_loadu_ps(m, scales);
  for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(out + (r0 + r) * ldo, m, _mm512_mul_ps(acc[r], s));
}

// One row's 64 inputs at a time: a gather of the lane's 4 bytes from 16 consecutive chunks is 64 consecutive inputs;
// integers of at most 8 bits are exact in bfloat16, whose bits are then the float's upper half.
template <typename T>
AR_AVX512 static void int8_row_avx512_t(const uint8_t* lane_bytes, int64_t k, T* row) {
  const __m512i index = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(kChunk / 4));
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  int64_t c = 0;
  for (; c + 64 <= k; c += 64) {
    const __m512i v = _mm512_xor_si512(_mm512_i32gather_epi32(index, lane_bytes + (c / 4) * kChunk, 4), flip);
    for (int j = 0; j < 4; ++j) {
      const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(v, j)));
      if constexpr (std::is_same<T, float>::value) {
        _mm512_storeu_ps(row + c + 16 * j, f);
      } else {
        _mm256_storeu_si256((__m256i*)(row + c + 16 * j), _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(f), 16)));
      }
    }
  }
  for (; c < k; ++c) row[c] = T(float(int32_t(lane_bytes[(c / 4) * kChunk + c % 4]) - 128));
}

// One lane (output row) of an int4 tile (F: int5) dequantised for the dense prefill: w = float(q - offset) * step + zero
// for each of the lane's groups, multiplied then added (no fused multiply-add, as the scalar reference), in float32 or
// rounded to bfloat16 to nearest even (c10::BFloat16's rounding, NaN as 0x7FC0). A group's 32 codes are 4 bytes of each
// of its 4 chunks: low nibbles are inputs 8c + i, high nibbles 8c + 4 + i.
template <typename T, bool F>
AR_AVX512 static void int4_row_avx512_t(const uint8_t* tile, const uint16_t* sc, int64_t groups, int64_t l, T* row) {
  const __m128i nib = _mm_set1_epi8(0x0F);
  const __m512i sixteen = _mm512_set1_epi32(16), one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7FFF),
                nan = _mm512_set1_epi32(0x7FC0);
  const __m512 offset = _mm512_set1_ps(F ? 16.0f : 8.0f);
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* group = tile + g * group_bytes<F>();
    const __m128i v = _mm_setr_epi32(load4((const int8_t*)group + 4 * l), load4((const int8_t*)group + kChunk + 4 * l),
                                     load4((const int8_t*)group + 2 * kChunk + 4 * l),
                                     load4((const int8_t*)group + 3 * kChunk + 4 * l));
    const __m128i lo = _mm_and_si128(v, nib), hi = _mm_and_si128(_mm_srli_epi16(v, 4), nib);
    const __m128i halves[2] = {_mm_unpacklo_epi32(lo, hi), _mm_unpackhi_epi32(lo, hi)};  // chunks 0-1, then 2-3
    uint32_t bits = 0;  // int5: bit 4m + i is bit 4l + i of mask m (m = 2c: low nibbles of chunk c, 2c + 1: high)
    if constexpr (F) {
      for (int m = 0; m < 8; ++m) bits |= uint32_t((load_mask(group, m) >> (4 * l)) & 0xF) << (4 * m);
    }
    const __m512 step = _mm512_set1_ps(bf16_to_float(sc[g * 32 + l])), zero = _mm512_set1_ps(bf16_to_float(sc[g * 32 + 16 + l]));
    for (int h = 0; h < 2; ++h) {
      __m512i q = _mm512_cvtepu8_epi32(halves[h]);
      if constexpr (F) q = _mm512_mask_or_epi32(q, __mmask16(bits >> (16 * h)), q, sixteen);
      const __m512 w = _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(q), offset), step), zero);
      T* out = row + g * kGroup + 16 * h;
      if constexpr (std::is_same<T, float>::value) {
        _mm512_storeu_ps(out, w);
      } else {
        const __m512i b = _mm512_castps_si512(w);
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(b, _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(b, 16), one), half)), 16);
        r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(w, w, _CMP_UNORD_Q), nan);
        _mm256_storeu_si256((__m256i*)out, _mm512_cvtepi32_epi16(r));
      }
    }
  }
}

// ------------------------------------------------------------------------------------------------ tables

template <bool F>
static Plan<Int4Fn> int4_tables(int64_t isa) {
  static const Int4Fn avx2[4] = {int4_line_avx2<F>, int4_tile_avx2<2, F>, int4_tile_avx2<3, F>, int4_tile_avx2<4, F>};
  static const Int4Fn avxvnni[4] = {int4_line_avxvnni<F>, int4_tile_avxvnni<2, F>, int4_tile_avxvnni<3, F>,
                                    int4_tile_avxvnni<4, F>};
  static const Int4Fn avx512[8] = {int4_tile_avx512<1, F>, int4_tile_avx512<2, F>, int4_tile_avx512<3, F>,
                                   int4_tile_avx512<4, F>, int4_tile_avx512<5, F>, int4_tile_avx512<6, F>,
                                   int4_tile_avx512<7, F>, int4_tile_avx512<8, F>};
  if (isa == kAvx512Vnni) return {avx512, 8};
  if (isa == kAvxVnni) return {avxvnni, 4};
  if (isa == kAvx2) return {avx2, 4};
  return {nullptr, 0};
}

Plan<Int4Fn> simd_int4_plan(int64_t isa) { return int4_tables<false>(isa); }
Plan<Int4Fn> simd_int5_plan(int64_t isa) { return int4_tables<true>(isa); }

Plan<Int8Fn> simd_int8_plan(int64_t isa) {
  static const Int8Fn avx2[4] = {int8_line_avx2<1>, int8_line_avx2<2>, int8_tile_avx2<3>, int8_tile_avx2<4>};
  static const Int8Fn avxvnni[4] = {int8_line_avxvnni<1>, int8_line_avxvnni<2>, int8_tile_avxvnni<3>,
                                    int8_tile_avxvnni<4>};
  static const Int8Fn avx512[8] = {int8_tile_avx512<1>, int8_tile_avx512<2>, int8_tile_avx512<3>, int8_tile_avx512<4>,
                                   int8_tile_avx512<5>, int8_tile_avx512<6>, int8_tile_avx512<7>, int8_tile_avx512<8>};
  if (isa == kAvx512Vnni) return {avx512, 8};
  if (isa == kAvxVnni) return {avxvnni, 4};
  if (isa == kAvx2) return {avx2, 4};
  return {nullptr, 0};
}

void int8_row_avx512(const uint8_t* lane_bytes, int64_t k, float* row) { int8_row_avx512_t(lane_bytes, k, row); }
void int8_row_avx512(const uint8_t* lane_bytes, int64_t k, at::BFloat16* row) { int8_row_avx512_t(lane_bytes, k, row); }
template <typename T>
void int4_row_avx512(const uint8_t* tile, const uint16_t* sc, int64_t groups, int64_t lane, bool fifth, T* row) {
  if (fifth) {
    int4_row_avx512_t<T, true>(tile, sc, groups, lane, row);
  } else {
    int4_row_avx512_t<T, false>(tile, sc, groups, lane, row);
  }
}
template void int4_row_avx512<float>(const uint8_t*, const uint16_t*, int64_t, int64_t, bool, float*);
template void int4_row_avx512<at::BFloat16>(const uint8_t*, const uint16_t*, int64_t, int64_t, bool, at::BFloat16*);

#else
Plan<Int4Fn> simd_int4_plan(int64_t) { return {nullptr, 0}; }
Plan<Int4Fn> simd_int5_plan(int64_t) { return {nullptr, 0}; }
Plan<Int8Fn> simd_int8_plan(int64_t) { return {nullptr, 0}; }
void int8_row_avx512(const uint8_t*, int64_t, float*) {}
void int8_row_avx512(const uint8_t*, int64_t, at::BFloat16*) {}
template <typename T>
void int4_row_avx512(const uint8_t*, const uint16_t*, int64_t, int64_t, bool, T*) {}
template void int4_row_avx512<float>(const uint8_t*, const uint16_t*, int64_t, int64_t, bool, float*);
template void int4_row_avx512<at::BFloat16>(const uint8_t*, const uint16_t*, int64_t, int64_t, bool, at::BFloat16*);
#endif  // AR_X86

}  // namespace active_rag_kernels
