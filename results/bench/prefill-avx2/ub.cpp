// Instruction throughput on this core: vpmaddubsw alone, vpmaddubsw + vpmaddwd (the int8 path's pair), vfmadd (fp32).
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdint>
#define N 12
template <class F> double rate(F f, long iters, int per_iter) {
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    f(iters);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s < best) best = s;
  }
  return double(iters) * per_iter / best / 1e9;  // instructions per ns
}
volatile int sink;
int main() {
  long it = 50000000;
  double a = rate([](long n) {
    __m256i acc[N]; __m256i w = _mm256_set1_epi8(3), x = _mm256_set1_epi8(5);
    for (int i = 0; i < N; ++i) acc[i] = _mm256_set1_epi16(i);
    for (long k = 0; k < n; ++k) {
      _Pragma("GCC unroll 16") for (int i = 0; i < N; ++i) acc[i] = _mm256_maddubs_epi16(acc[i], x);
      __asm__ volatile("" : "+x"(w), "+x"(x));
    }
    int s = 0; for (int i = 0; i < N; ++i) s += _mm256_extract_epi32(acc[i], 0); sink = s; }, it, N);
  double b = rate([](long n) {
    __m256i acc[N]; __m256i w = _mm256_set1_epi8(3), x = _mm256_set1_epi8(5), ones = _mm256_set1_epi16(1);
    for (int i = 0; i < N; ++i) acc[i] = _mm256_set1_epi32(i);
    for (long k = 0; k < n; ++k) {
      _Pragma("GCC unroll 16") for (int i = 0; i < N; ++i) acc[i] = _mm256_madd_epi16(_mm256_maddubs_epi16(acc[i], x), ones);
      __asm__ volatile("" : "+x"(w), "+x"(x));
    }
    int s = 0; for (int i = 0; i < N; ++i) s += _mm256_extract_epi32(acc[i], 0); sink = s; }, it, N);
  double c = rate([](long n) {
    __m256 acc[N]; __m256 p = _mm256_set1_ps(1.0001f), q = _mm256_set1_ps(0.9999f);
    for (int i = 0; i < N; ++i) acc[i] = _mm256_set1_ps(i);
    for (long k = 0; k < n; ++k) {
      _Pragma("GCC unroll 16") for (int i = 0; i < N; ++i) acc[i] = _mm256_fmadd_ps(acc[i], p, q);
      __asm__ volatile("" : "+x"(p), "+x"(q));
    }
    float s = 0; for (int i = 0; i < N; ++i) s += _mm256_cvtss_f32(acc[i]); sink = int(s); }, it, N);
  std::printf("one core: vpmaddubsw %.2f /ns -> %.0f int8 MAC/ns (u8 x s8, 16-bit sums: the int4 path)\n", a, 32 * a);
  std::printf("one core: vpmaddubsw+vpmaddwd %.2f pairs/ns -> %.0f int8 MAC/ns (the int8 path)\n", b, 32 * b);
  std::printf("one core: vfmadd231ps %.2f /ns -> %.0f fp32 MAC/ns\n", c, 8 * c);
}
