// What bounds a prefill's packed products on one core: the AVX512-VNNI instruction's own rate, and the int8 and int4
// tiles of active_rag/kernels/csrc/simd_avx512.cpp reduced to their loops (8 rows a pass, 16 outputs, K = 1536, the
// activations and the tile in the L1/L2 cache), with and without int4's per-group float fold. Built and run by
// run.sh; prints GMAC/s (multiply-adds, 1e9 a second) for one core.
#include <immintrin.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

static inline int32_t load4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

constexpr int K = 1536, G = K / 32, R = 8;

struct Acts {
  const int8_t* xq;
  const int32_t* start;
  const float* sums;
  const float* sx;
};

// 12 independent chains of vpdpbusd in one asm block (so the compiler keeps them in registers): the instruction's
// throughput, 64 multiply-adds each.
static double vnni_peak() {
  __m512i a0 = _mm512_set1_epi32(1), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0,
          a10 = a0, a11 = a0;
  const __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(5);
  const long n = 20000000;
  const auto t = std::chrono::steady_clock::now();
  for (long j = 0; j < n; ++j) {
    asm volatile(
        "vpdpbusd %12, %13, %0\n\tvpdpbusd %12, %13, %1\n\tvpdpbusd %12, %13, %2\n\tvpdpbusd %12, %13, %3\n\t"
        "vpdpbusd %12, %13, %4\n\tvpdpbusd %12, %13, %5\n\tvpdpbusd %12, %13, %6\n\tvpdpbusd %12, %13, %7\n\t"
        "vpdpbusd %12, %13, %8\n\tvpdpbusd %12, %13, %9\n\tvpdpbusd %12, %13, %10\n\tvpdpbusd %12, %13, %11"
        : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9),
          "+v"(a10), "+v"(a11)
        : "v"(x), "v"(y));
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  return n * 12.0 * 64 / s / 1e9;
}

// int8: a group's 8 chunks of 4 inputs x 16 outputs, one float fold (scale by sx) a group and row.
__attribute__((noinline)) static void int8_tile(const uint8_t* tile, const Acts& a, float* out) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int g = 0; g < G; ++g) {
    __m512i d[R];
    for (int r = 0; r < R; ++r) d[r] = _mm512_set1_epi32(a.start[r * G + g]);
    for (int c = 0; c < 8; ++c) {
      const __m512i v = _mm512_loadu_si512(tile + g * 512 + c * 64);
      for (int r = 0; r < R; ++r) d[r] = _mm512_dpbusd_epi32(d[r], v, _mm512_set1_epi32(load4(a.xq + r * K + g * 32 + c * 4)));
    }
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[r]), _mm512_set1_ps(a.sx[r * G + g]), acc[r]);
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + r * 16, acc[r]);
}

// int4: 4 chunks of nibbles a group (low and high halves). Fold: the kernel's per-group fold (the integer sum times
// the group's 16 steps, plus its zeros times the row's sum, times the row's scale); Two: two chains of sums a row (low
// and high nibbles, added before the fold) as the kernel keeps them, else one; Tiles: outputs of that many tiles a pass
// (each activation broadcast read once for all of them), 8 / Tiles rows.
template <bool Fold, bool Two = true, int Tiles = 1>
__attribute__((noinline)) static void int4_tile(const uint8_t* tile, const float* sc, const Acts& a, float* out) {
  constexpr int Rows = R / Tiles;
  const __m512i nib = _mm512_set1_epi8(0x0F);
  __m512 acc[R];
  __m512i total[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), total[r] = _mm512_setzero_si512();
  for (int g = 0; g < G; ++g) {
    __m512i d[R], e[R];
    for (int r = 0; r < R; ++r) {
      d[r] = Fold ? _mm512_set1_epi32(a.start[(r % Rows) * G + g]) : total[r];
      e[r] = _mm512_setzero_si512();
    }
    for (int c = 0; c < 4; ++c) {
      __m512i lo[Tiles], hi[Tiles];
      for (int t = 0; t < Tiles; ++t) {
        const __m512i v = _mm512_loadu_si512(tile + t * G * 256 + g * 256 + c * 64);
        lo[t] = _mm512_and_si512(v, nib), hi[t] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
      }
      for (int r = 0; r < Rows; ++r) {
        const int8_t* x = a.xq + r * K + g * 32 + c * 8;
        const __m512i x0 = _mm512_set1_epi32(load4(x)), x1 = _mm512_set1_epi32(load4(x + 4));
        for (int t = 0; t < Tiles; ++t) {
          __m512i& s = d[t * Rows + r];
          s = _mm512_dpbusd_epi32(s, lo[t], x0);
          if constexpr (Two) {
            e[t * Rows + r] = _mm512_dpbusd_epi32(e[t * Rows + r], hi[t], x1);
          } else {
            s = _mm512_dpbusd_epi32(s, hi[t], x1);
          }
        }
      }
    }
    if constexpr (Fold) {
      for (int t = 0; t < Tiles; ++t) {
        const __m512 step = _mm512_loadu_ps(sc + t * G * 32 + g * 32), zero = _mm512_loadu_ps(sc + t * G * 32 + g * 32 + 16);
        for (int r = 0; r < Rows; ++r) {
          const int i = t * Rows + r;
          __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(Two ? _mm512_add_epi32(d[i], e[i]) : d[i]), step);
          v = _mm512_fmadd_ps(zero, _mm512_set1_ps(a.sums[r * G + g]), v);
          acc[i] = _mm512_fmadd_ps(v, _mm512_set1_ps(a.sx[r * G + g]), acc[i]);
        }
      }
    } else {
      for (int r = 0; r < R; ++r) total[r] = Two ? _mm512_add_epi32(d[r], e[r]) : d[r];
    }
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + r * 16, Fold ? acc[r] : _mm512_cvtepi32_ps(total[r]));
}

// Q4_K's 6-bit scales and mins summed in integers over a superblock of 8 groups (vpmulld a group and row for each),
// one float fold a superblock: what a scale per 256 inputs would allow; here with this layout's per-32 activations,
// the products as the kernel's, to time the integer work only.
__attribute__((noinline)) static void int4k_integer(const uint8_t* tile, const uint8_t* k, const Acts& a, float* out) {
  const __m512i nib = _mm512_set1_epi8(0x0F);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int b = 0; b < G / 8; ++b) {
    const uint8_t* sb = k + b * 320;
    __m512i q[R], m[R];
    for (int r = 0; r < R; ++r) q[r] = m[r] = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      const int g = b * 8 + j;
      const __m512i s = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(sb + 64 + 16 * j)));
      const __m512i mins = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(sb + 192 + 16 * j)));
      __m512i d[R];
      for (int r = 0; r < R; ++r) d[r] = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        const __m512i v = _mm512_loadu_si512(tile + g * 256 + c * 64);
        const __m512i lo = _mm512_and_si512(v, nib), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
        for (int r = 0; r < R; ++r) {
          const int8_t* x = a.xq + r * K + g * 32 + c * 8;
          d[r] = _mm512_dpbusd_epi32(d[r], lo, _mm512_set1_epi32(load4(x)));
          d[r] = _mm512_dpbusd_epi32(d[r], hi, _mm512_set1_epi32(load4(x + 4)));
        }
      }
      for (int r = 0; r < R; ++r) {
        q[r] = _mm512_add_epi32(q[r], _mm512_mullo_epi32(d[r], s));
        m[r] = _mm512_add_epi32(m[r], _mm512_mullo_epi32(mins, _mm512_set1_epi32(a.start[r * G + g])));
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)sb));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(sb + 32)));
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(a.sx[r * G + b]);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q[r]), _mm512_mul_ps(d, x), acc[r]);
      acc[r] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m[r]), _mm512_mul_ps(dmin, x), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + r * 16, acc[r]);
}

template <typename F>
static double rate(F&& f) {
  const int iters = 40000;
  f();
  const auto t = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) f();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  return double(iters) * R * 16 * K / s / 1e9;
}

int main() {
  std::vector<uint8_t> t8(G * 512, 0x37), t4(2 * G * 256, 0x37), k(G / 8 * 320, 3);
  std::vector<float> sc(2 * G * 32, 0.01f), f(R * G, 1.0f);
  std::vector<int8_t> x(R * K, 3);
  std::vector<int32_t> start(R * G, 0);
  const Acts a{x.data(), start.data(), f.data(), f.data()};
  float out[R * 16];
  std::printf("vpdpbusd peak            %6.1f GMAC/s\n", vnni_peak());
  std::printf("int8 tile                %6.1f GMAC/s\n", rate([&] { int8_tile(t8.data(), a, out); }));
  std::printf("int4 tile, fold          %6.1f GMAC/s\n", rate([&] { int4_tile<true>(t4.data(), sc.data(), a, out); }));
  std::printf("int4, no fold            %6.1f GMAC/s\n", rate([&] { int4_tile<false>(t4.data(), sc.data(), a, out); }));
  std::printf("int4, fold, one chain    %6.1f GMAC/s\n", rate([&] { int4_tile<true, false>(t4.data(), sc.data(), a, out); }));
  std::printf("int4, fold, two tiles    %6.1f GMAC/s\n", rate([&] { int4_tile<true, false, 2>(t4.data(), sc.data(), a, out); }));
  std::printf("int4k, integer scales    %6.1f GMAC/s\n", rate([&] { int4k_integer(t4.data(), k.data(), a, out); }));
  return 0;
}
