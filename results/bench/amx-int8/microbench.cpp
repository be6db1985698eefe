#include <immintrin.h>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <vector>
#include <sys/syscall.h>
#include <unistd.h>
#define AMX __attribute__((target("amx-tile,amx-int8,avx2,fma,avx512f,avx512bw")))
struct alignas(64) Cfg { uint8_t p=1, s=0, r[14]={}; uint16_t colsb[16]={}; uint8_t rows[16]={}; };
static Cfg cfg;
constexpr int G = 48;  // groups (K=1536)
constexpr int ROWS = 944, KP = G*32;
static int8_t xq[ROWS*KP]; static int8_t B[G*512]; static float sx[ROWS*G], sums[ROWS*G]; static uint16_t sc[G*32];
static float out[ROWS*16];
AMX inline void foldg(const int32_t* c, int r0, int gg, __m512* acc) {
  const __m512 step = _mm512_set1_ps(sc[gg]), zero = _mm512_set1_ps(sc[gg+1]);
#pragma GCC unroll 16
  for (int r = 0; r < 16; ++r) {
    int at = (r0 + r) * G + gg;
    __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16*r)), step);
    t = _mm512_fmadd_ps(zero, _mm512_set1_ps(sums[at]), t);
    acc[r] = _mm512_fmadd_ps(t, _mm512_set1_ps(sx[at]), acc[r]);
  }
}
template <int MODE>
AMX void block(int r0, int32_t* cb) {
  __m512 acc[16];
  for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
  const int8_t* x = xq + r0 * KP;
  for (int g = 0; g < G; g += 2) {
    if (MODE != 2) {
    _tile_zero(0); _tile_loadd(2, x + g*32, KP); _tile_loadd(4, B + g*512, 64); _tile_dpbssd(0, 2, 4);
    _tile_zero(1); _tile_loadd(3, x + (g+1)*32, KP); _tile_loadd(5, B + (g+1)*512, 64); _tile_dpbssd(1, 3, 5);
    if (MODE != 5) { _tile_stored(0, cb, 64); _tile_stored(1, cb + 256, 64); }
    }
    if (MODE != 1 && MODE != 5) {
      for (int h = 0; h < 2; ++h) foldg(cb + 256 * h, r0, g + h, acc);
    }
  }
  for (int r = 0; r < 16; ++r) _mm512_storeu_ps(out + (r0 + r) * 16, acc[r]);
}

AMX void block3(int r0, int32_t* cb) {
  __m512 acc[16];
  for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
  const int8_t* x = xq + r0 * KP;
  // prologue: groups 0,1 into C0,C1
  _tile_zero(0); _tile_loadd(4, x, KP); _tile_loadd(6, B, 64); _tile_dpbssd(0, 4, 6);
  _tile_zero(1); _tile_loadd(5, x + 32, KP); _tile_loadd(7, B + 512, 64); _tile_dpbssd(1, 5, 7);
  for (int g = 0; g < G; g += 4) {
    // issue g+2, g+3 into C2, C3
    if (g + 2 < G) {
      _tile_zero(2); _tile_loadd(4, x + (g+2)*32, KP); _tile_loadd(6, B + (g+2)*512, 64); _tile_dpbssd(2, 4, 6);
      _tile_zero(3); _tile_loadd(5, x + (g+3)*32, KP); _tile_loadd(7, B + (g+3)*512, 64); _tile_dpbssd(3, 5, 7);
    }
    _tile_stored(0, cb, 64); _tile_stored(1, cb + 256, 64);
    foldg(cb, r0, g, acc); foldg(cb + 256, r0, g + 1, acc);
    if (g + 4 < G) {
      _tile_zero(0); _tile_loadd(4, x + (g+4)*32, KP); _tile_loadd(6, B + (g+4)*512, 64); _tile_dpbssd(0, 4, 6);
      _tile_zero(1); _tile_loadd(5, x + (g+5)*32, KP); _tile_loadd(7, B + (g+5)*512, 64); _tile_dpbssd(1, 5, 7);
    }
    if (g + 2 < G) {
      _tile_stored(2, cb + 512, 64); _tile_stored(3, cb + 768, 64);
      foldg(cb + 512, r0, g + 2, acc); foldg(cb + 768, r0, g + 3, acc);
    }
  }
  for (int r = 0; r < 16; ++r) _mm512_storeu_ps(out + (r0 + r) * 16, acc[r]);
}

AMX void block4(int r0, int32_t* ring) {
  __m512 acc[16];
  for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
  const int8_t* x = xq + r0 * KP;
  for (int g = 0; g < G + 3; ++g) {
    if (g < G) {
      if (g % 2 == 0) { _tile_zero(0); _tile_loadd(2, x + g*32, KP); _tile_loadd(4, B + g*512, 64); _tile_dpbssd(0, 2, 4); }
      else { _tile_zero(1); _tile_loadd(3, x + g*32, KP); _tile_loadd(5, B + g*512, 64); _tile_dpbssd(1, 3, 5); }
    }
    const int s = g - 1;
    if (s >= 0 && s < G) {
      if (s % 2 == 0) _tile_stored(0, ring + 256 * (s % 4), 64); else _tile_stored(1, ring + 256 * (s % 4), 64);
    }
    const int f = g - 3;
    if (f >= 0) foldg(ring + 256 * (f % 4), r0, f, acc);
  }
  for (int r = 0; r < 16; ++r) _mm512_storeu_ps(out + (r0 + r) * 16, acc[r]);
}
AMX void load_config() { _tile_loadconfig(&cfg); }
AMX void release() { _tile_release(); }
// GFLOP/s of `reps` passes of `block` over every 16-row block (one core)
template <typename Block>
double timed(Block block, int reps) {
  load_config();
  alignas(64) static int32_t cb[1024] = {};
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) for (int r0 = 0; r0 < ROWS; r0 += 16) block(r0, cb);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  release();
  return 2.0 * ROWS * 16 * KP * reps / s / 1e9;
}
int main() {
  syscall(SYS_arch_prctl, 0x1023, 18);
  for (int t = 0; t < 2; ++t) { cfg.rows[t]=16; cfg.colsb[t]=64; cfg.rows[2+t]=16; cfg.colsb[2+t]=32; cfg.rows[4+t]=8; cfg.colsb[4+t]=64; }
  Cfg cfg0 = cfg;
  for (int i = 0; i < ROWS*KP; ++i) xq[i] = (i*7)%255-127;
  for (int i = 0; i < G*512; ++i) B[i] = (i*13)%15-8;
  for (int i = 0; i < ROWS*G; ++i) { sx[i]=0.01f; sums[i]=1.0f; }
  for (int i = 0; i < G*32; ++i) sc[i]=0x3f80;
  printf("full  %.0f GF/s (1 core)\n", timed(block<0>, 50));
  printf("tiles only %.0f GF/s\n", timed(block<1>, 50));
  printf("fold only %.0f GF/s\n", timed(block<2>, 50));
  for (int t = 0; t < 4; ++t) { cfg.rows[t]=16; cfg.colsb[t]=64; } for (int t = 4; t < 6; ++t) { cfg.rows[t]=16; cfg.colsb[t]=32; } for (int t = 6; t < 8; ++t) { cfg.rows[t]=8; cfg.colsb[t]=64; }
  printf("pipelined %.0f GF/s\n", timed(block3, 50));
  cfg = cfg0; printf("tiles no store %.0f GF/s\n", timed(block<5>, 50));
  printf("lagged %.0f GF/s\n", timed(block4, 50));
}
