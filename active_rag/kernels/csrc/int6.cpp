// int6 tiles: a GGUF's Q6_K tensors as the file stores them (layout.pack_int6k, kernels.h): w = d * sc * (q - 32) with
// a signed scale per 16 inputs. Each group of 32 inputs sums its two halves apart (chunks 0-1 and 2-3), each started
// at -32 times its activations' sum (Activations::halves), and folds them as
//   t = float(half 0) * step0;  t = fma(float(half 1), step1, t);  acc = fma(t, sx, acc)
// on every path: the scalar reference here, AVX2 (vpmaddubsw + vpmaddwd: a chunk's two products a pair sum at most
// 2 * 2 * 63 * 127 < 2^15 before widening), AVX-VNNI and AVX512-VNNI (vpdpbusd), so every path's outputs are
// bit-identical. The dense prefill's rows (int6_row): float(q - 32) * step.

#include "kernels.h"
#include "simd.h"

#include <cmath>
#include <cstring>

namespace active_rag_kernels {

static void int6_tile_scalar(const uint8_t* tile, const uint16_t* sc, int64_t groups, const Activations& a, int64_t r0,
                             int64_t rows, float* out, int64_t ldo, int64_t valid) {
  for (int64_t r = r0; r < r0 + rows; ++r) {
    const int8_t* x = a.xq + r * a.kp;
    const float* sx = a.sx + r * a.groups;
    const int32_t* halves = a.halves + r * a.groups * 2;
    for (int64_t l = 0; l < valid; ++l) {
      float acc = 0.0f;
      for (int64_t g = 0; g < groups; ++g) {
        const uint8_t* group = tile + g * kInt6GroupBytes;
        int32_t d[2] = {halves[2 * g], halves[2 * g + 1]};
        for (int64_t c = 0; c < 4; ++c) {
          const int8_t* xc = x + g * kGroup + c * 8;
          for (int i = 0; i < 4; ++i) d[c / 2] += int6_code(group, c, 0, l, i) * xc[i] + int6_code(group, c, 1, l, i) * xc[4 + i];
        }
        float t = float(d[0]) * int6_step(sc, 2 * g, l);
        t = std::fma(float(d[1]), int6_step(sc, 2 * g + 1, l), t);
        acc = std::fma(t, sx[g], acc);
      }
      out[r * ldo + l] = acc;
    }
  }
}

template <typename T>
void int6_row(const uint8_t* tile, const uint16_t* sc, int64_t groups, int64_t l, T* row) {
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* group = tile + g * kInt6GroupBytes;
    for (int64_t c = 0; c < 4; ++c) {
      const float step = int6_step(sc, 2 * g + c / 2, l);
      T* o = row + g * kGroup + c * 8;
      for (int i = 0; i < 4; ++i) {
        o[i] = T(float(int6_code(group, c, 0, l, i) - 32) * step);
        o[4 + i] = T(float(int6_code(group, c, 1, l, i) - 32) * step);
      }
    }
  }
}
template void int6_row<float>(const uint8_t*, const uint16_t*, int64_t, int64_t, float*);
template void int6_row<at::BFloat16>(const uint8_t*, const uint16_t*, int64_t, int64_t, at::BFloat16*);

#if AR_X86
static inline const uint8_t* int6_super(const uint16_t* sc, int64_t g) {
  return reinterpret_cast<const uint8_t*>(sc) + (g / kSuperGroups) * kInt6SuperBytes;
}

// ------------------------------------------------------------------------------------------------ AVX2, AVX-VNNI

// Half h (lanes 8h to 8h + 7) of chunk c's codes: the nibbles with bits 4 and 5 added from the masks.
AR_AVX2 static inline void int6_codes8(const uint8_t* group, int c, int64_t h, __m256i& lo, __m256i& hi) {
  const __m256i nib = _mm256_set1_epi8(0x0F);
  const __m256i v = _mm256_loadu_si256((const __m256i*)(group + h * 32 + c * kChunk));
  lo = _mm256_and_si256(v, nib);
  hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
  for (int p = 0; p < 2; ++p) {
    const int8_t value = p == 0 ? 16 : 32;
    lo = _mm256_or_si256(lo, mask_bytes(uint32_t(int6_mask(group, p, 2 * c) >> (32 * h)), value));
    hi = _mm256_or_si256(hi, mask_bytes(uint32_t(int6_mask(group, p, 2 * c + 1) >> (32 * h)), value));
  }
}

AR_AVX2 static inline __m256 int6_steps8(const uint16_t* sc, int64_t g, int64_t half, int64_t h) {
  const uint8_t* b = int6_super(sc, g);
  const int64_t s = 2 * (g % kSuperGroups) + half;
  const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(b + 16 * h)));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(b + 32 + 16 * s + 8 * h)))), d);
}

// Each row's two half sums of group g started at -32 times its activations' half sums.
template <int R>
AR_AVX2 static inline void int6_starts8(const Activations& a, int64_t r0, int64_t g, __m256i (&d)[2][R]) {
  for (int r = 0; r < R; ++r) {
    const int32_t* start = a.halves + ((r0 + r) * a.groups + g) * 2;
    d[0][r] = _mm256_set1_epi32(start[0]);
    d[1][r] = _mm256_set1_epi32(start[1]);
  }
}

// t = float(half 0) * step0; t = fma(float(half 1), step1, t); acc = fma(t, sx, acc), for each row.
template <int R>
AR_AVX2 static inline void int6_fold8(__m256 (&acc)[R], const __m256i (&d)[2][R], const uint16_t* sc, int64_t g,
                                      int64_t h, const Activations& a, int64_t r0) {
  const __m256 s0 = int6_steps8(sc, g, 0, h), s1 = int6_steps8(sc, g, 1, h);
  for (int r = 0; r < R; ++r) {
    __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(d[0][r]), s0);
    t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d[1][r]), s1, t);
    acc[r] = _mm256_fmadd_ps(t, _mm256_set1_ps(a.sx[(r0 + r) * a.groups + g]), acc[r]);
  }
}

template <int R>
AR_AVX2 static inline void int6_store8(const __m256 (&acc)[R], float* out, int64_t r0, int64_t ldo, int64_t h,
                                       int64_t valid) {
  for (int r = 0; r < R; ++r) {
    alignas(32) float tmp[8];
    _mm256_store_ps(tmp, acc[r]);
    std::memcpy(out + (r0 + r) * ldo + 8 * h, tmp, size_t(std::min<int64_t>(8, valid - 8 * h)) * sizeof(float));
  }
}

template <int R>
AR_AVX2 static void int6_tile_avx2(const uint8_t* tile, const uint16_t* sc, int64_t groups, const Activations& a,
                                   int64_t r0, int64_t, float* out, int64_t ldo, int64_t valid) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t h = 0; h < 2 && valid > 8 * h; ++h) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      __m256i d[2][R];
      int6_starts8<R>(a, r0, g, d);
      const uint8_t* group = tile + g * kInt6GroupBytes;
      const int8_t* xg = a.xq + r0 * a.kp + g * kGroup;
      prefetch_ahead(group, kInt6GroupBytes, int6_super(sc, g), kInt6SuperBytes / kSuperGroups);
      for (int c = 0; c < 4; ++c) {
        __m256i lo, hi;
        int6_codes8(group, c, h, lo, hi);
        for (int r = 0; r < R; ++r) {
          const int8_t* xr = xg + r * a.kp + c * 8;
          const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_set1_epi32(load4(xr))),
                                               _mm256_maddubs_epi16(hi, _mm256_set1_epi32(load4(xr + 4))));
          d[c / 2][r] = _mm256_add_epi32(d[c / 2][r], _mm256_madd_epi16(s16, ones));
        }
      }
      int6_fold8<R>(acc, d, sc, g, h, a, r0);
    }
    int6_store8<R>(acc, out, r0, ldo, h, valid);
  }
}

template <int R>
AR_AVXVNNI static void int6_tile_avxvnni(const uint8_t* tile, const uint16_t* sc, int64_t groups, const Activations& a,
                                         int64_t r0, int64_t, float* out, int64_t ldo, int64_t valid) {
  for (int64_t h = 0; h < 2 && valid > 8 * h; ++h) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      __m256i d[2][R];
      int6_starts8<R>(a, r0, g, d);
      const uint8_t* group = tile + g * kInt6GroupBytes;
      const int8_t* xg = a.xq + r0 * a.kp + g * kGroup;
      prefetch_ahead(group, kInt6GroupBytes, int6_super(sc, g), kInt6SuperBytes / kSuperGroups);
      for (int c = 0; c < 4; ++c) {
        __m256i lo, hi;
        int6_codes8(group, c, h, lo, hi);
        for (int r = 0; r < R; ++r) {
          const int8_t* xr = xg + r * a.kp + c * 8;
          d[c / 2][r] = _mm256_dpbusd_avx_epi32(d[c / 2][r], lo, _mm256_set1_epi32(load4(xr)));
          d[c / 2][r] = _mm256_dpbusd_avx_epi32(d[c / 2][r], hi, _mm256_set1_epi32(load4(xr + 4)));
        }
      }
      int6_fold8<R>(acc, d, sc, g, h, a, r0);
    }
    int6_store8<R>(acc, out, r0, ldo, h, valid);
  }
}

// ------------------------------------------------------------------------------------------------ AVX512-VNNI

// Rows a pass; more rows expand the tile once (int6_expand_avx512). On a Zen 4 the 1.5B's output head took 10.3 ms
// at 8 rows in one pass against 17.9 in two passes of 4 over the expanded tile (results/bench/kquants/README.md).
constexpr int64_t kInt6Rows = 8;

// A tile expanded for a prefill's passes (X): a byte a code, each group's chunk c as its low nibbles' codes then its
// high nibbles' (64 bytes each, the chunk's layout): the bits are put back once a tile, not once a pass.
constexpr int64_t kInt6Expanded = 8 * kChunk;

AR_AVX512 static inline void int6_codes16(const uint8_t* w, int c, __m512i& lo, __m512i& hi) {
  const __m512i nib = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16), thirty_two = _mm512_set1_epi8(32);
  const __m512i v = _mm512_loadu_si512(w + c * kChunk);
  lo = _mm512_and_si512(v, nib);
  hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
  lo = _mm512_mask_add_epi8(lo, _cvtu64_mask64(int6_mask(w, 0, 2 * c)), lo, sixteen);
  lo = _mm512_mask_add_epi8(lo, _cvtu64_mask64(int6_mask(w, 1, 2 * c)), lo, thirty_two);
  hi = _mm512_mask_add_epi8(hi, _cvtu64_mask64(int6_mask(w, 0, 2 * c + 1)), hi, sixteen);
  hi = _mm512_mask_add_epi8(hi, _cvtu64_mask64(int6_mask(w, 1, 2 * c + 1)), hi, thirty_two);
}

AR_AVX512 static void int6_expand_avx512(const uint8_t* tile, int64_t groups, uint8_t* codes) {
  for (int64_t g = 0; g < groups; ++g) {
    for (int c = 0; c < 4; ++c) {
      __m512i lo, hi;
      int6_codes16(tile + g * kInt6GroupBytes, c, lo, hi);
      _mm512_storeu_si512(codes + g * kInt6Expanded + 2 * c * kChunk, lo);
      _mm512_storeu_si512(codes + g * kInt6Expanded + (2 * c + 1) * kChunk, hi);
    }
  }
}

template <int R, bool X = false>
AR_AVX512 static void int6_tile_avx512(const uint8_t* tile, const uint16_t* sc, int64_t groups, const Activations& a,
                                       int64_t r0, int64_t, float* out, int64_t ldo, int64_t valid) {
  constexpr int64_t group_bytes = X ? kInt6Expanded : kInt6GroupBytes;
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i d[2][R];
    for (int r = 0; r < R; ++r) {
      const int32_t* start = a.halves + ((r0 + r) * a.groups + g) * 2;
      d[0][r] = _mm512_set1_epi32(start[0]);
      d[1][r] = _mm512_set1_epi32(start[1]);
    }
    const uint8_t* w = tile + g * group_bytes;
    const int8_t* xg = a.xq + r0 * a.kp + g * kGroup;
    if constexpr (!X) prefetch_ahead(w, kInt6GroupBytes, int6_super(sc, g), kInt6SuperBytes / kSuperGroups);
    for (int c = 0; c < 4; ++c) {
      __m512i lo, hi;
      if constexpr (X) {
        lo = _mm512_loadu_si512(w + 2 * c * kChunk);
        hi = _mm512_loadu_si512(w + (2 * c + 1) * kChunk);
      } else {
        int6_codes16(w, c, lo, hi);
      }
      for (int r = 0; r < R; ++r) {
        const int8_t* xr = xg + r * a.kp + c * 8;
        d[c / 2][r] = _mm512_dpbusd_epi32(d[c / 2][r], lo, _mm512_set1_epi32(load4(xr)));
        d[c / 2][r] = _mm512_dpbusd_epi32(d[c / 2][r], hi, _mm512_set1_epi32(load4(xr + 4)));
      }
    }
    const uint8_t* b = int6_super(sc, g);
    const int64_t s = 2 * (g % kSuperGroups);
    const __m512 dd = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)b));
    const __m512 s0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(b + 32 + 16 * s)))), dd);
    const __m512 s1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(b + 48 + 16 * s)))), dd);
    for (int r = 0; r < R; ++r) {
      __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(d[0][r]), s0);
      t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[1][r]), s1, t);
      acc[r] = _mm512_fmadd_ps(t, _mm512_set1_ps(a.sx[(r0 + r) * a.groups + g]), acc[r]);
    }
  }
  const __mmask16 m = valid >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << valid) - 1u);
  for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(out + (r0 + r) * ldo, m, acc[r]);
}
#endif  // AR_X86

Plan<Int4Fn> int6_plan(int64_t isa) {
  static const Int4Fn scalar[1] = {int6_tile_scalar};
#if AR_X86
  static const Int4Fn avx2[4] = {int6_tile_avx2<1>, int6_tile_avx2<2>, int6_tile_avx2<3>, int6_tile_avx2<4>};
  static const Int4Fn avxvnni[4] = {int6_tile_avxvnni<1>, int6_tile_avxvnni<2>, int6_tile_avxvnni<3>,
                                    int6_tile_avxvnni<4>};
  static const Int4Fn avx512[8] = {int6_tile_avx512<1>, int6_tile_avx512<2>, int6_tile_avx512<3>, int6_tile_avx512<4>,
                                   int6_tile_avx512<5>, int6_tile_avx512<6>, int6_tile_avx512<7>, int6_tile_avx512<8>};
  static const Int4Fn avx512x[8] = {int6_tile_avx512<1, true>, int6_tile_avx512<2, true>, int6_tile_avx512<3, true>,
                                    int6_tile_avx512<4, true>, int6_tile_avx512<5, true>, int6_tile_avx512<6, true>,
                                    int6_tile_avx512<7, true>, int6_tile_avx512<8, true>};
  if (isa == kAvx512Vnni) return {avx512, kInt6Rows, avx512x, int6_expand_avx512, kInt6Expanded};
  if (isa == kAvxVnni) return {avxvnni, 4};
  if (isa == kAvx2) return {avx2, 4};
#endif
  return {scalar, 0};
}

}  // namespace active_rag_kernels
