// The vector paths of active-rag's decode kernels: AVX2 (vpmaddubsw + vpmaddwd) and AVX-VNNI (vpdpbusd) here,
// AVX512-VNNI in simd_avx512.cpp, each function compiled for its instruction set by a target attribute (the file itself
// for generic x86-64), chosen at run time by decode_kernel.cpp. Each computes the scalar reference's integers and
// float operations in its order, so every path's outputs are bit-identical.

#include "kernels.h"
#include "simd.h"

#include <cstring>

namespace active_rag_kernels {

#if AR_X86
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

// A tile expanded for a prefill (X): a byte a code, each group's chunk c as its low nibbles' codes (64 bytes, the
// chunk's layout) then its high nibbles' (int5_expand_avx2).
constexpr int64_t kExpandedGroup = 8 * kChunk;

template <bool F, bool X = false>
constexpr int64_t tile_group_bytes() {
  return X ? kExpandedGroup : group_bytes<F>();
}

// The codes of chunk c's half h (lanes 8h to 8h + 7) of a group: its low and high nibbles as bytes, and for int5
// (F) their fifth bits added; from an expanded tile (X), two loads.
template <bool F, bool X = false>
AR_AVX2 static inline void int4_codes(const uint8_t* group, int c, int64_t h, __m256i& lo, __m256i& hi) {
  if constexpr (X) {
    lo = _mm256_loadu_si256((const __m256i*)(group + c * 2 * kChunk + h * 32));
    hi = _mm256_loadu_si256((const __m256i*)(group + c * 2 * kChunk + kChunk + h * 32));
    return;
  }
  const __m256i nib = _mm256_set1_epi8(0x0F);
  const __m256i v = _mm256_loadu_si256((const __m256i*)(group + h * 32 + c * kChunk));
  lo = _mm256_and_si256(v, nib);
  hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
  if constexpr (F) {
    lo = _mm256_or_si256(lo, mask_bytes(uint32_t(load_mask(group, 2 * c) >> (32 * h)), 16));
    hi = _mm256_or_si256(hi, mask_bytes(uint32_t(load_mask(group, 2 * c + 1) >> (32 * h)), 16));
  }
}

// A prefill's int5 tile, read in hundreds of passes of 4 rows, expanded once (for each pass the fifth bits took 6
// vector ops per 32 codes, shared by only 4 rows): the same codes, so the same sums.
AR_AVX2 static void int5_expand_avx2(const uint8_t* tile, int64_t groups, uint8_t* codes) {
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* group = tile + g * group_bytes<true>();
    uint8_t* into = codes + g * kExpandedGroup;
    for (int c = 0; c < 4; ++c)
      for (int64_t h = 0; h < 2; ++h) {
        __m256i lo, hi;
        int4_codes<true>(group, c, h, lo, hi);
        _mm256_storeu_si256((__m256i*)(into + c * 2 * kChunk + h * 32), lo);
        _mm256_storeu_si256((__m256i*)(into + c * 2 * kChunk + kChunk + h * 32), hi);
      }
  }
}

// The int4 epilogue of a group: acc += sx * ((d - 8 S) * step + zero * S), d already holding d - 8 S.
AR_AVX2 static inline __m256 int4_fold8(__m256 acc, __m256i d, __m256 step, __m256 zero, float sum, float sx) {
  __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(d), step);
  t = _mm256_fmadd_ps(zero, _mm256_set1_ps(sum), t);
  return _mm256_fmadd_ps(t, _mm256_set1_ps(sx), acc);
}

// Half h (lanes 8h to 8h + 7) of a group's steps and zeros: bfloat16 from the tile's scales, or (K) from its Q4_K
// scales (k_step_zero's values).
template <bool K>
AR_AVX2 static inline void steps8(const uint16_t* sc, int64_t g, int64_t h, __m256& step, __m256& zero) {
  if constexpr (K) {
    const uint8_t* b = k_super(sc, g);
    const int64_t j = g % kSuperGroups;
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(b + 16 * h)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(b + 32 + 16 * h)));
    const __m256 s = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(b + 64 + 16 * j + 8 * h))));
    const __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(b + 192 + 16 * j + 8 * h))));
    step = _mm256_mul_ps(s, d);
    zero = _mm256_fmsub_ps(_mm256_set1_ps(8.0f), step, _mm256_mul_ps(m, dmin));
  } else {
    step = bf16x8(sc + g * 32 + h * 8);
    zero = bf16x8(sc + g * 32 + 16 + h * 8);
  }
}

// AVX2: u8 x s8 pairs summed in 16 bits, each chunk adding 4 products to a 16-bit sum. int4 widens once a group
// (16 products, at most 16 * 15 * 128 = 30,720 < 2^15); int5 (codes up to 31) once every two chunks (8 products, at
// most 31,744): 4 rows from L1 on one Zen 2 core, 43.5 MAC/ns against 37.4 widening every chunk.
template <int R, bool F, bool X = false, bool K = false>
AR_AVX2 static void int4_tile_avx2(const uint8_t* tile, const uint16_t* sc, int64_t groups, const Activations& a,
                                   int64_t r0, int64_t, float* out, int64_t ldo, int64_t valid) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t h = 0; h < 2 && valid > 8 * h; ++h) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      __m256i s16[R], s32[R];
      for (int r = 0; r < R; ++r) s16[r] = s32[r] = _mm256_setzero_si256();
      const uint8_t* group = tile + g * tile_group_bytes<F, X>();
      const int8_t* xg = a.xq + r0 * a.kp + g * kGroup;
      prefetch_ahead(group, tile_group_bytes<F, X>(), scales_at<K>(sc, g), scale_bytes<K>());
      for (int c = 0; c < 4; ++c) {
        __m256i lo, hi;
        int4_codes<F, X>(group, c, h, lo, hi);
        for (int r = 0; r < R; ++r) {
          const int8_t* xr = xg + r * a.kp + c * 8;
          s16[r] = _mm256_add_epi16(s16[r], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(load4(xr))));
          s16[r] = _mm256_add_epi16(s16[r], _mm256_maddubs_epi16(hi, _mm256_set1_epi32(load4(xr + 4))));
          AR_KEEP(s16[r]);
          if (F && (c & 1)) {
            s32[r] = _mm256_add_epi32(s32[r], _mm256_madd_epi16(s16[r], ones));
            AR_KEEP(s32[r]);
            s16[r] = _mm256_setzero_si256();
          }
        }
      }
      __m256 step, zero;
      steps8<K>(sc, g, h, step, zero);
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

template <int R, bool F, bool X = false, bool K = false>
AR_AVXVNNI static void int4_tile_avxvnni(const uint8_t* tile, const uint16_t* sc, int64_t groups, const Activations& a,
                                         int64_t r0, int64_t, float* out, int64_t ldo, int64_t valid) {
  for (int64_t h = 0; h < 2 && valid > 8 * h; ++h) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      __m256i d[R];
      for (int r = 0; r < R; ++r) d[r] = _mm256_set1_epi32(a.start[(r0 + r) * a.groups + g]);
      const uint8_t* group = tile + g * tile_group_bytes<F, X>();
      const int8_t* xg = a.xq + r0 * a.kp + g * kGroup;
      prefetch_ahead(group, tile_group_bytes<F, X>(), scales_at<K>(sc, g), scale_bytes<K>());
      for (int c = 0; c < 4; ++c) {
        __m256i lo, hi;
        int4_codes<F, X>(group, c, h, lo, hi);
        for (int r = 0; r < R; ++r) {
          const int8_t* xr = xg + r * a.kp + c * 8;
          d[r] = _mm256_dpbusd_avx_epi32(d[r], lo, _mm256_set1_epi32(load4(xr)));
          d[r] = _mm256_dpbusd_avx_epi32(d[r], hi, _mm256_set1_epi32(load4(xr + 4)));
        }
      }
      __m256 step, zero;
      steps8<K>(sc, g, h, step, zero);
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
          AR_KEEP(d[r]);
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
          AR_KEEP(d[h][r]);
        }
      }
    }
    int8_line_fold<R>(acc, d, a, r0, g);
  }
  int8_line_store<R>(acc, scales, out, r0, ldo, valid);
}

// One row of int4 (F: int5) with both halves of each chunk in one pass (see int8_line_avx2); int4_tile_avx2's sums,
// widening and epilogue per lane.
template <bool F, bool K = false>
AR_AVX2 static void int4_line_avx2(const uint8_t* tile, const uint16_t* sc, int64_t groups, const Activations& a,
                                   int64_t r0, int64_t, float* out, int64_t ldo, int64_t valid) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t g = 0; g < groups; ++g) {
    __m256i s16[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    __m256i s32[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    const uint8_t* group = tile + g * group_bytes<F>();
    const int8_t* xg = a.xq + r0 * a.kp + g * kGroup;
    prefetch_ahead(group, group_bytes<F>(), scales_at<K>(sc, g), scale_bytes<K>());
    for (int c = 0; c < 4; ++c) {
      const __m256i x_lo = _mm256_set1_epi32(load4(xg + c * 8)), x_hi = _mm256_set1_epi32(load4(xg + c * 8 + 4));
      for (int h = 0; h < 2; ++h) {
        __m256i lo, hi;
        int4_codes<F>(group, c, h, lo, hi);
        s16[h] = _mm256_add_epi16(s16[h], _mm256_maddubs_epi16(lo, x_lo));
        s16[h] = _mm256_add_epi16(s16[h], _mm256_maddubs_epi16(hi, x_hi));
        AR_KEEP(s16[h]);
        if (F && (c & 1)) {
          s32[h] = _mm256_add_epi32(s32[h], _mm256_madd_epi16(s16[h], ones));
          AR_KEEP(s32[h]);
          s16[h] = _mm256_setzero_si256();
        }
      }
    }
    const int64_t at = r0 * a.groups + g;
    for (int h = 0; h < 2; ++h) {
      __m256 step, zero;
      steps8<K>(sc, g, h, step, zero);
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

template <bool F, bool K = false>
AR_AVXVNNI static void int4_line_avxvnni(const uint8_t* tile, const uint16_t* sc, int64_t groups, const Activations& a,
                                         int64_t r0, int64_t, float* out, int64_t ldo, int64_t valid) {
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t at = r0 * a.groups + g;
    __m256i d[2] = {_mm256_set1_epi32(a.start[at]), _mm256_set1_epi32(a.start[at])};
    const uint8_t* group = tile + g * group_bytes<F>();
    const int8_t* xg = a.xq + r0 * a.kp + g * kGroup;
    prefetch_ahead(group, group_bytes<F>(), scales_at<K>(sc, g), scale_bytes<K>());
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
      __m256 step, zero;
      steps8<K>(sc, g, h, step, zero);
      acc[h] = int4_fold8(acc[h], d[h], step, zero, a.sums[at], a.sx[at]);
    }
  }
  for (int h = 0; h < 2 && valid > 8 * h; ++h) store8(out + r0 * ldo + 8 * h, acc[h], valid - 8 * h);
}

// ------------------------------------------------------------------------------------------------ tables

template <bool F>
static Plan<Int4Fn> int4_tables(int64_t isa) {
  static const Int4Fn avx2[4] = {int4_line_avx2<F>, int4_tile_avx2<2, F>, int4_tile_avx2<3, F>, int4_tile_avx2<4, F>};
  static const Int4Fn avxvnni[4] = {int4_line_avxvnni<F>, int4_tile_avxvnni<2, F>, int4_tile_avxvnni<3, F>,
                                    int4_tile_avxvnni<4, F>};
  // int5's tiles expanded for a prefill (AVX-512 reads the fifth bits as masks, one op a register)
  static const Int4Fn avx2x[4] = {int4_tile_avx2<1, F, true>, int4_tile_avx2<2, F, true>, int4_tile_avx2<3, F, true>,
                                  int4_tile_avx2<4, F, true>};
  static const Int4Fn avxvnnix[4] = {int4_tile_avxvnni<1, F, true>, int4_tile_avxvnni<2, F, true>,
                                     int4_tile_avxvnni<3, F, true>, int4_tile_avxvnni<4, F, true>};
  if (isa == kAvx512Vnni) return avx512_int4_plan(F);
  const auto plan = [](const Int4Fn* table, const Int4Fn* expanded) {
    return F ? Plan<Int4Fn>{table, 4, expanded, int5_expand_avx2, kExpandedGroup} : Plan<Int4Fn>{table, 4};
  };
  if (isa == kAvxVnni) return plan(avxvnni, avxvnnix);
  if (isa == kAvx2) return plan(avx2, avx2x);
  return {nullptr, 0};
}

Plan<Int4Fn> simd_int4_plan(int64_t isa) { return int4_tables<false>(isa); }
Plan<Int4Fn> simd_int5_plan(int64_t isa) { return int4_tables<true>(isa); }

Plan<Int4Fn> simd_int4k_plan(int64_t isa) {
  static const Int4Fn avx2[4] = {int4_line_avx2<false, true>, int4_tile_avx2<2, false, false, true>,
                                 int4_tile_avx2<3, false, false, true>, int4_tile_avx2<4, false, false, true>};
  static const Int4Fn avxvnni[4] = {int4_line_avxvnni<false, true>, int4_tile_avxvnni<2, false, false, true>,
                                    int4_tile_avxvnni<3, false, false, true>, int4_tile_avxvnni<4, false, false, true>};
  if (isa == kAvx512Vnni) return avx512_int4k_plan();
  if (isa == kAvxVnni) return {avxvnni, 4};
  if (isa == kAvx2) return {avx2, 4};
  return {nullptr, 0};
}

Plan<Int8Fn> simd_int8_plan(int64_t isa) {
  static const Int8Fn avx2[4] = {int8_line_avx2<1>, int8_line_avx2<2>, int8_tile_avx2<3>, int8_tile_avx2<4>};
  static const Int8Fn avxvnni[4] = {int8_line_avxvnni<1>, int8_line_avxvnni<2>, int8_tile_avxvnni<3>,
                                    int8_tile_avxvnni<4>};
  if (isa == kAvx512Vnni) return avx512_int8_plan();
  if (isa == kAvxVnni) return {avxvnni, 4};
  if (isa == kAvx2) return {avx2, 4};
  return {nullptr, 0};
}

#else
Plan<Int4Fn> simd_int4_plan(int64_t) { return {nullptr, 0}; }
Plan<Int4Fn> simd_int5_plan(int64_t) { return {nullptr, 0}; }
Plan<Int4Fn> simd_int4k_plan(int64_t) { return {nullptr, 0}; }
Plan<Int8Fn> simd_int8_plan(int64_t) { return {nullptr, 0}; }
#endif  // AR_X86

}  // namespace active_rag_kernels
