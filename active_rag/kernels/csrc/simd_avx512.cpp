// The AVX512-VNNI paths of active-rag's decode kernels (vpdpbusd, 16 lanes a vector: a whole tile), and the AVX-512
// rows of the dense prefill's dequantisation; the same integers and float operations as the scalar reference (see
// simd.cpp).

#include "kernels.h"
#include "simd.h"

#include <cstring>
#include <type_traits>

namespace active_rag_kernels {

#if AR_X86
// ------------------------------------------------------------------------------------------------ AVX512-VNNI
// 16 lanes a vector (a whole tile); at most 8 rows a pass (32 vector registers).

AR_AVX512 static inline __m512 bf16x16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}

AR_AVX512 static inline __mmask16 lanes(int64_t valid) {
  return valid >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << valid) - 1u);
}

// A group's 16 steps and zeros: bfloat16 from the tile's scales, or (K) from its Q4_K scales (k_step_zero's values).
template <bool K>
AR_AVX512 static inline void steps16(const uint16_t* sc, int64_t g, __m512& step, __m512& zero) {
  if constexpr (K) {
    const uint8_t* b = k_super(sc, g);
    const int64_t j = g % kSuperGroups;
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)b));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(b + 32)));
    const __m512 s = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(b + 64 + 16 * j))));
    const __m512 m = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(b + 192 + 16 * j))));
    step = _mm512_mul_ps(s, d);
    zero = _mm512_fmsub_ps(_mm512_set1_ps(8.0f), step, _mm512_mul_ps(m, dmin));
  } else {
    step = bf16x16(sc + g * 32);
    zero = bf16x16(sc + g * 32 + 16);
  }
}

template <int R, bool F, bool K = false>
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
    prefetch_ahead(w, group_bytes<F>(), scales_at<K>(sc, g), scale_bytes<K>());
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
    __m512 step, zero;
    steps16<K>(sc, g, step, zero);
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
template <typename T, bool F, bool K = false>
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
    float step_l, zero_l;
    if constexpr (K) {
      k_step_zero(sc, g, l, step_l, zero_l);
    } else {
      step_l = bf16_to_float(sc[g * 32 + l]);
      zero_l = bf16_to_float(sc[g * 32 + 16 + l]);
    }
    const __m512 step = _mm512_set1_ps(step_l), zero = _mm512_set1_ps(zero_l);
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

Plan<Int4Fn> avx512_int4_plan(bool five) {
  static const Int4Fn int4[8] = {int4_tile_avx512<1, false>, int4_tile_avx512<2, false>, int4_tile_avx512<3, false>,
                                 int4_tile_avx512<4, false>, int4_tile_avx512<5, false>, int4_tile_avx512<6, false>,
                                 int4_tile_avx512<7, false>, int4_tile_avx512<8, false>};
  static const Int4Fn int5[8] = {int4_tile_avx512<1, true>, int4_tile_avx512<2, true>, int4_tile_avx512<3, true>,
                                 int4_tile_avx512<4, true>, int4_tile_avx512<5, true>, int4_tile_avx512<6, true>,
                                 int4_tile_avx512<7, true>, int4_tile_avx512<8, true>};
  return {five ? int5 : int4, 8};
}

Plan<Int4Fn> avx512_int4k_plan() {
  static const Int4Fn int4k[8] = {int4_tile_avx512<1, false, true>, int4_tile_avx512<2, false, true>,
                                  int4_tile_avx512<3, false, true>, int4_tile_avx512<4, false, true>,
                                  int4_tile_avx512<5, false, true>, int4_tile_avx512<6, false, true>,
                                  int4_tile_avx512<7, false, true>, int4_tile_avx512<8, false, true>};
  return {int4k, 8};
}

Plan<Int8Fn> avx512_int8_plan() {
  static const Int8Fn int8[8] = {int8_tile_avx512<1>, int8_tile_avx512<2>, int8_tile_avx512<3>, int8_tile_avx512<4>,
                                 int8_tile_avx512<5>, int8_tile_avx512<6>, int8_tile_avx512<7>, int8_tile_avx512<8>};
  return {int8, 8};
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
template <typename T>
void int4k_row_avx512(const uint8_t* tile, const uint16_t* sc, int64_t groups, int64_t lane, T* row) {
  int4_row_avx512_t<T, false, true>(tile, sc, groups, lane, row);
}
template void int4k_row_avx512<float>(const uint8_t*, const uint16_t*, int64_t, int64_t, float*);
template void int4k_row_avx512<at::BFloat16>(const uint8_t*, const uint16_t*, int64_t, int64_t, at::BFloat16*);

#else
void int8_row_avx512(const uint8_t*, int64_t, float*) {}
void int8_row_avx512(const uint8_t*, int64_t, at::BFloat16*) {}
template <typename T>
void int4_row_avx512(const uint8_t*, const uint16_t*, int64_t, int64_t, bool, T*) {}
template void int4_row_avx512<float>(const uint8_t*, const uint16_t*, int64_t, int64_t, bool, float*);
template void int4_row_avx512<at::BFloat16>(const uint8_t*, const uint16_t*, int64_t, int64_t, bool, at::BFloat16*);
template <typename T>
void int4k_row_avx512(const uint8_t*, const uint16_t*, int64_t, int64_t, T*) {}
template void int4k_row_avx512<float>(const uint8_t*, const uint16_t*, int64_t, int64_t, float*);
template void int4k_row_avx512<at::BFloat16>(const uint8_t*, const uint16_t*, int64_t, int64_t, at::BFloat16*);
#endif  // AR_X86

}  // namespace active_rag_kernels
