// active-rag's CPU decode kernels: int4, int5 and int8 weights times int8-quantised activations.
//
// Decoding reads every weight once per step, so a step is as fast as the weights stream from memory. torch's
// weight-only kernels convert each weight to float before multiplying (the int4 one is bound by unpacking nibbles,
// about 12 GB/s on 2 threads). These multiply integers instead: each row of activations is quantised to int8 once
// per call, in groups of 32 inputs (one scale a group, as llama.cpp's Q8_0), and the products are integer dot
// products of four bytes (`vpdpbusd` on AVX512-VNNI and AVX-VNNI, `vpmaddubsw` + `vpmaddwd` on AVX2).
//
// Layout (made by active_rag/kernels/layout.py when the weights are packed; the same on every CPU): outputs in tiles
// of 16, a tile's weights contiguous, in the order the kernel reads them. One 64-byte chunk holds 16 lanes (outputs)
// of 4 consecutive inputs for int8 (byte 4 * lane + i: input 4 * chunk + i, stored as q + 128 in [1, 255]) and of 8
// inputs for int4 (byte 4 * lane + i: input 8 * chunk + i in the low nibble, 8 * chunk + 4 + i in the high one), so
// one load (and for int4 one AND and one shift) gives a vector of 16 outputs' unsigned bytes and a broadcast 4 bytes
// of activations multiplies it. int4 scales: per tile and group of 32 inputs, 16 bfloat16 steps then 16 zeros,
// w = (q - 8) * step + zero (torch's int4 convention). int8 scales: one float32 per output, w = q * scale. int5: int4's
// four chunks of nibbles a group, then a fifth chunk of eight 64-bit masks holding each code's bit 4 (one masked add
// of 16 a vector), w = (q - 16) * step + zero, int4's scales.
//
// Every instruction-set path computes the same integers and the same float operations in the same order, so all of
// them (and the scalar reference) give bit-identical outputs. One binary serves every x86-64 CPU: the vector code
// (simd.cpp, simd_avx512.cpp) is compiled with per-function target attributes and chosen by cpuid at run time. Threads: the kernels'
// own pool over tiles (pool.h, torch.get_num_threads() threads), not OpenMP. This file: CPU detection, the activations' quantisation,
// the scalar reference, the dispatch and the ops' registration (the dequantisation for the dense prefill: dequant.cpp).

#include "kernels.h"
#include "pool.h"

#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <unistd.h>

#if AR_X86
#include <cpuid.h>
#endif

namespace active_rag_kernels {

// ------------------------------------------------------------------------------------------------ CPU features

struct Features {
  bool avx2 = false;
  bool avxvnni = false;
  bool avx512vnni = false;
};

static Features detect() {
  Features f;
#if AR_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  // F16C too: the Q4_K scales' float16 constants (every AVX2 CPU has it)
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28), fma = c & (1u << 12), f16c = c & (1u << 29);
  if (!(osxsave && avx && fma && f16c)) return f;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  const bool ymm = (lo & 0x6u) == 0x6u;    // the OS saves the SSE and AVX state
  const bool zmm = (lo & 0xE6u) == 0xE6u;  // ... and the AVX-512 state
  if (!ymm || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = b & (1u << 5);
  f.avx512vnni = zmm && (b & (1u << 16)) && (b & (1u << 30)) && (c & (1u << 11));  // F, BW, VNNI
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avxvnni = f.avx2 && (a & (1u << 4));
#endif
  return f;
}

static const Features& features() {
  static const Features f = detect();
  return f;
}

static bool supported(int64_t isa) {
  const Features& f = features();
  switch (isa) {
    case kScalar: return true;
    case kAvx2: return f.avx2;
    case kAvxVnni: return f.avxvnni;
    case kAvx512Vnni: return f.avx512vnni;
    default: return false;
  }
}

static int64_t best_isa() {
  for (int64_t isa = kAvx512Vnni; isa > kScalar; --isa) {
    if (supported(isa)) return isa;
  }
  return kScalar;
}

static bool isa_supported(int64_t isa) { return supported(isa); }

static int64_t resolve(int64_t isa) {
  if (isa == kAuto) return best_isa();
  TORCH_CHECK(supported(isa), "active_rag kernels: this CPU cannot run instruction set ", isa);
  return isa;
}

int64_t resolve_isa(int64_t isa) { return resolve(isa); }

// ------------------------------------------------------------------------------------------------ activations

// A float rounded to bfloat16 and back, as torch's conversion rounds it (c10::BFloat16(float): to nearest even, NaN
// to the quiet NaN 0x7FC0), branch-free so a row's loop vectorises.
static inline float bf16_rounded(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  const uint32_t r = (u & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC00000u : rounded;
  float y;
  std::memcpy(&y, &r, sizeof y);
  return y;
}

// One row (`round`: each value first rounded to bfloat16, bf16_rounded). The absolute maximum is taken on the bit
// patterns (exact, vectorisable); rounding to the nearest even integer adds and subtracts 1.5 * 2^23 (|value| <= 127).
// Cloned per instruction set; every clone gives the same integers (elementwise IEEE operations and integer
// reductions only).
template <bool round>
#if AR_X86 && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void quantize_row(const float* v, int64_t k, int64_t kp, int8_t* xq, float* sx, int32_t* sums) {
  for (int64_t g0 = 0; g0 < kp; g0 += kGroup) {
    const int64_t n = std::min<int64_t>(kGroup, std::max<int64_t>(k - g0, 0));
    const int64_t g = g0 / kGroup;
    int8_t* q = xq + g0;
    float rounded[kGroup];
    if (round)
      for (int64_t i = 0; i < n; ++i) rounded[i] = bf16_rounded(v[g0 + i]);
    const float* values = round ? rounded : v + g0;
    uint32_t top = 0;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t u;
      std::memcpy(&u, values + i, sizeof u);
      u &= 0x7fffffffu;
      top = u > top ? u : top;
    }
    float amax;
    std::memcpy(&amax, &top, sizeof amax);
    if (top > 0x7f7fffffu || amax < 1e-30f) {  // inf or NaN (the output becomes NaN), or nothing to multiply
      sx[g] = top > 0x7f7fffffu ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
      sums[g] = 0;
      std::memset(q, 0, kGroup);
      continue;
    }
    const float inv = 127.0f / amax;
    sx[g] = amax / 127.0f;
    int32_t total = 0;
    for (int64_t i = 0; i < n; ++i) {
      float y = values[i] * inv;
      y = (y + 12582912.0f) - 12582912.0f;
      int32_t r = int32_t(y);
      r = r > 127 ? 127 : (r < -127 ? -127 : r);
      q[i] = int8_t(r);
      total += r;
    }
    for (int64_t i = n; i < kGroup; ++i) q[i] = 0;
    sums[g] = total;
  }
}

// The quantised rows' buffers, 64-byte aligned: a block of the calling thread's, reused call after call (a decode step
// makes about 170 calls, and four tensors allocated each time cost it 0.3-0.5 ms), or for a prefill's hundreds of
// rows, above kScratchBytes, a tensor of the call's own. The block is only touched by the thread's own calls, one at
// a time; the pool's workers read it while the call that filled it waits for them.
constexpr int64_t kScratchBytes = int64_t(1) << 20;

static uint8_t* scratch(int64_t bytes, at::Tensor& owner) {
  auto align = [](uint8_t* p) { return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63)); };
  if (bytes > kScratchBytes) {
    owner = at::empty({bytes + 64}, at::TensorOptions().dtype(at::kByte));
    return align(owner.data_ptr<uint8_t>());
  }
  thread_local std::vector<uint8_t> block;
  if (block.empty()) block.resize(size_t(kScratchBytes + 64));
  return align(block.data());
}

// `round_inputs`: a float32 row is first rounded to bfloat16 (to nearest even, as torch's conversion), which is what
// the layers' unfused path feeds the kernel (`x.to(torch.bfloat16)`), so the fused ops give the same integers.
// `halves` (int6): also -offset times the sums of each group's first and second 16 integers (Activations::halves).
static Activations quantize(const at::Tensor& x, int64_t kp, int32_t offset, bool round_inputs = false,
                            bool halves = false) {
  const int64_t rows = x.size(0), k = x.size(1);
  Activations a;
  a.kp = kp;
  a.groups = kp / kGroup;
  const int64_t xq_bytes = (rows * kp + 63) / 64 * 64, group_bytes = (rows * a.groups * 4 + 63) / 64 * 64;
  uint8_t* block = scratch(xq_bytes + (halves ? 5 : 3) * group_bytes, a.owner);
  int8_t* xq = reinterpret_cast<int8_t*>(block);
  float* sx = reinterpret_cast<float*>(block + xq_bytes);
  float* sums_f = reinterpret_cast<float*>(block + xq_bytes + group_bytes);
  int32_t* sums = reinterpret_cast<int32_t*>(block + xq_bytes + 2 * group_bytes);  // the integer sums first, then -offset * S in place
  const bool is_float = x.scalar_type() == at::kFloat;
  const float* pf = is_float ? x.data_ptr<float>() : nullptr;
  const uint16_t* pb = is_float ? nullptr : reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  // rows are independent: a prefill's hundreds are split over the pool (a decode step's few stay in this thread)
  SpinPool::parallel_for(rows, std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(k, 1)), [&](int64_t begin, int64_t end) {
    if (is_float) {
      for (int64_t r = begin; r < end; ++r) {
        if (round_inputs) {
          quantize_row<true>(pf + r * k, k, kp, xq + r * kp, sx + r * a.groups, sums + r * a.groups);
        } else {
          quantize_row<false>(pf + r * k, k, kp, xq + r * kp, sx + r * a.groups, sums + r * a.groups);
        }
      }
      return;
    }
    std::vector<float> row(size_t(std::max<int64_t>(k, 1)));  // a bfloat16 row's values as floats first
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t i = 0; i < k; ++i) row[size_t(i)] = bf16_to_float(pb[r * k + i]);
      quantize_row<false>(row.data(), k, kp, xq + r * kp, sx + r * a.groups, sums + r * a.groups);
    }
  });
  for (int64_t i = 0; i < rows * a.groups; ++i) {
    sums_f[i] = float(sums[i]);
    sums[i] = -offset * sums[i];
  }
  if (halves) {
    int32_t* h = reinterpret_cast<int32_t*>(block + xq_bytes + 3 * group_bytes);
    for (int64_t i = 0; i < rows * a.groups; ++i) {
      const int8_t* q = xq + (i / a.groups) * kp + (i % a.groups) * kGroup;
      int32_t first = 0, second = 0;
      for (int j = 0; j < 16; ++j) {
        first += q[j];
        second += q[16 + j];
      }
      h[2 * i] = -offset * first;
      h[2 * i + 1] = -offset * second;
    }
    a.halves = h;
  }
  a.xq = xq;
  a.sx = sx;
  a.sums = sums_f;
  a.start = sums;
  return a;
}

// A layer op's epilogue (int*_linear): each output rounded to bfloat16 as torch rounds it (bf16_rounded), then the
// bias (float32) added, as the unfused path's `.to(torch.bfloat16).to(x.dtype) + bias` does. run_tiles applies it to a
// tile's columns after the tile's last pass, while they are in cache, not in a second pass over the whole output
// (that pass, a scalar loop with a 64-bit `i % n` an element for the bias, cost a 939-row q_proj of the 0.5B 2.3 of
// its 9.5 ms).
struct Epilogue {
  bool round = false;           // a layer op: its input rounded to bfloat16 before quantisation, its outputs after
  const float* bias = nullptr;  // [n], or none
};

#if AR_X86 && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void finish_block(float* out, int64_t ldo, int64_t rows, int64_t cols, const float* bias) {
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out + r * ldo;
    if (bias != nullptr) {
      for (int64_t j = 0; j < cols; ++j) o[j] = bf16_rounded(o[j]) + bias[j];
    } else {
      for (int64_t j = 0; j < cols; ++j) o[j] = bf16_rounded(o[j]);
    }
  }
}

// ------------------------------------------------------------------------------------------------ scalar reference

// F (int5): the tile's groups hold a fifth chunk of masks, each code's bit 4 (layout.pack_int5), and the codes are
// offset by 16 (the activations' `start` says so). K: the tile's scales are Q4_K's (k_step_zero).
template <bool F, bool K = false>
static void int4_tile_scalar(const uint8_t* tile, const uint16_t* sc, int64_t groups, const Activations& a, int64_t r0,
                             int64_t rows, float* out, int64_t ldo, int64_t valid) {
  const int64_t group_bytes = (F ? 5 : 4) * kChunk;
  for (int64_t r = r0; r < r0 + rows; ++r) {
    const int8_t* x = a.xq + r * a.kp;
    const float* sx = a.sx + r * a.groups;
    const float* sums = a.sums + r * a.groups;
    const int32_t* start = a.start + r * a.groups;
    for (int64_t l = 0; l < valid; ++l) {
      float acc = 0.0f;
      for (int64_t g = 0; g < groups; ++g) {
        int32_t d = start[g];
        const uint8_t* group = tile + g * group_bytes;
        for (int64_t c = 0; c < 4; ++c) {
          const uint8_t* w = group + c * kChunk + l * 4;
          const int8_t* xc = x + g * kGroup + c * 8;
          for (int i = 0; i < 4; ++i) {
            int32_t lo = w[i] & 15, hi = w[i] >> 4;
            if (F) {
              lo |= fifth_bit(group, 2 * c, 4 * l + i);
              hi |= fifth_bit(group, 2 * c + 1, 4 * l + i);
            }
            d += lo * xc[i] + hi * xc[4 + i];
          }
        }
        float step, zero;
        if (K) {
          k_step_zero(sc, g, l, step, zero);
        } else {
          step = bf16_to_float(sc[g * 32 + l]);
          zero = bf16_to_float(sc[g * 32 + 16 + l]);
        }
        float t = float(d) * step;
        t = std::fma(zero, sums[g], t);
        acc = std::fma(t, sx[g], acc);
      }
      out[r * ldo + l] = acc;
    }
  }
}

static void int8_tile_scalar(const uint8_t* tile, const float* scales, int64_t groups, const Activations& a, int64_t r0,
                             int64_t rows, float* out, int64_t ldo, int64_t valid) {
  for (int64_t r = r0; r < r0 + rows; ++r) {
    const int8_t* x = a.xq + r * a.kp;
    const float* sx = a.sx + r * a.groups;
    const int32_t* start = a.start + r * a.groups;
    for (int64_t l = 0; l < valid; ++l) {
      float acc = 0.0f;
      for (int64_t g = 0; g < groups; ++g) {
        int32_t d = start[g];
        for (int64_t c = 0; c < 8; ++c) {
          const uint8_t* w = tile + (g * 8 + c) * kChunk + l * 4;
          const int8_t* xc = x + g * kGroup + c * 4;
          for (int i = 0; i < 4; ++i) d += int32_t(w[i]) * xc[i];
        }
        acc = std::fma(float(d), sx[g], acc);
      }
      out[r * ldo + l] = acc * scales[l];
    }
  }
}

// ------------------------------------------------------------------------------------------------ dispatch

static Plan<Int4Fn> int4_plan(int64_t isa, bool five, bool q4k) {
  static const Int4Fn scalar4[1] = {int4_tile_scalar<false>}, scalar5[1] = {int4_tile_scalar<true>},
                      scalar4k[1] = {int4_tile_scalar<false, true>};
  const Plan<Int4Fn> simd = five ? simd_int5_plan(isa) : q4k ? simd_int4k_plan(isa) : simd_int4_plan(isa);
  return simd.table != nullptr ? simd : Plan<Int4Fn>{five ? scalar5 : q4k ? scalar4k : scalar4, 0};
}

static Plan<Int8Fn> int8_plan(int64_t isa) {
  static const Int8Fn scalar[1] = {int8_tile_scalar};
  const Plan<Int8Fn> simd = simd_int8_plan(isa);
  return simd.table != nullptr ? simd : Plan<Int8Fn>{scalar, 0};
}

// The per-core L2 cache in bytes (sysconf; 512 KB where it does not say).
static int64_t l2_bytes() {
  static const int64_t bytes = [] {
#ifdef _SC_LEVEL2_CACHE_SIZE
    const long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
#else
    const long v = 0;
#endif
    return v > 0 ? int64_t(v) : int64_t(512) << 10;
  }();
  return bytes;
}

// Rows a block of a prefill's activations holds, in whole passes of `step`: about a quarter of the L2 cache of their
// int8 rows (`kp` bytes each), so a thread runs a block over each of its tiles while the block stays in L2, then the
// next block. Over all the rows at once, each tile streamed the whole activations (939 rows of the 1.5B model: 1.4 MB
// at K = 1536, 8.4 MB at K = 8960) from L3 again: on a Zen 4 (1 MB L2) blocks of 256 KB took the 1.5B's packed layers
// from 8.2 to 7.2 s a 939-row forward (results/bench/prefill-avx512/README.md). The sums are the same either way.
static int64_t row_block(int64_t rows, int64_t step, int64_t kp) {
  const int64_t fit = l2_bytes() / 4 / std::max<int64_t>(kp, 1) / step * step;
  return std::min(rows, std::max(step, fit));
}

// Runs `plan` over every tile, threads splitting the tiles (a chunk at least ~64 KB of weights times rows); within a
// tile the rows go in passes of plan.max_rows (0: all at once), so a tile is read from memory once a block of rows
// (row_block) and from cache after. Where the plan expands tiles and the rows take more than one pass, the rows are one
// block and each tile is expanded once into the thread's buffer, which the passes read.
template <typename Fn, typename Scale, typename TileScales>
static void run_tiles(const Plan<Fn>& plan, const uint8_t* tiles, int64_t tile_bytes, const Scale* scales,
                      TileScales scales_of, int64_t groups, const Activations& a, int64_t rows, float* out, int64_t n,
                      const Epilogue& epilogue) {
  const int64_t count = (n + kTile - 1) / kTile;
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(tile_bytes * rows, 1));
  const int64_t step = plan.max_rows > 0 ? plan.max_rows : rows;
  const bool expand = plan.expand != nullptr && rows > step;
  const int64_t block = expand || plan.max_rows == 0 ? rows : row_block(rows, step, a.kp);
  SpinPool::parallel_for(count, grain, [&](int64_t begin, int64_t end) {
    std::vector<uint8_t> codes(expand ? size_t(groups * plan.group_bytes) : 0);
    for (int64_t b0 = 0; b0 < rows; b0 += block) {
      const int64_t b1 = std::min(rows, b0 + block);
      for (int64_t t = begin; t < end; ++t) {
        const int64_t valid = std::min<int64_t>(kTile, n - t * kTile);
        const uint8_t* tile = tiles + t * tile_bytes;
        if (expand) {
          plan.expand(tile, groups, codes.data());
          tile = codes.data();
        }
        const Fn* table = expand ? plan.expanded : plan.table;
        for (int64_t r0 = b0; r0 < b1; r0 += step) {
          const int64_t rr = std::min<int64_t>(step, b1 - r0);
          const Fn fn = plan.max_rows > 0 ? table[rr - 1] : table[0];
          fn(tile, scales_of(scales, t), groups, a, r0, rr, out + t * kTile, n, valid);
        }
        if (epilogue.round)  // the block's outputs of the tile, while they are in cache
          finish_block(out + b0 * n + t * kTile, n, b1 - b0, valid,
                       epilogue.bias != nullptr ? epilogue.bias + t * kTile : nullptr);
      }
    }
  });
}

static at::Tensor rows_of(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 2, "active_rag kernels: x must be [rows, in_features]");
  TORCH_CHECK(x.device().is_cpu(), "active_rag kernels: CPU tensors only");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16,
              "active_rag kernels: x must be float32 or bfloat16");
  return x.contiguous();
}

// x [rows, K] float32/bfloat16; tiles uint8 [ceil(n / 16), K / 8, 64] (int5: [ceil(n / 16), K / 32 * 5, 64]); scales
// bfloat16 [ceil(n / 16), K / 32, 2, 16], or for int4 Q4_K's uint8 [ceil(n / 16), K / 256, 320] (layout.pack_int4k).
static at::Tensor int4_run(const at::Tensor& x_in, const at::Tensor& tiles, const at::Tensor& scales, int64_t n,
                           int64_t isa, const Epilogue& epilogue, bool five = false) {
  const char* op = five ? "int5_gemm" : "int4_gemm";
  const at::Tensor x = rows_of(x_in);
  const int64_t k = x.size(1), count = (n + kTile - 1) / kTile;
  const int64_t chunks = five ? k / kGroup * 5 : k / 8;
  TORCH_CHECK(k % kGroup == 0, op, ": in_features must be a multiple of 32");
  TORCH_CHECK(tiles.scalar_type() == at::kByte && tiles.is_contiguous() && tiles.dim() == 3 && tiles.size(0) == count &&
                  tiles.size(1) == chunks && tiles.size(2) == kChunk,
              op, five ? ": tiles must be uint8 [ceil(n / 16), in_features / 32 * 5, 64]"
                       : ": tiles must be uint8 [ceil(n / 16), in_features / 8, 64]");
  const bool q4k = !five && scales.scalar_type() == at::kByte;
  if (q4k) {
    TORCH_CHECK(k % (kGroup * kSuperGroups) == 0 && scales.is_contiguous() &&
                    scales.numel() == count * k / (kGroup * kSuperGroups) * kSuperBytes,
                op, ": Q4_K scales must be uint8 [ceil(n / 16), in_features / 256, 320]");
  } else {
    TORCH_CHECK(scales.scalar_type() == at::kBFloat16 && scales.is_contiguous() && scales.numel() == count * k,
                op, ": scales must be bfloat16 [ceil(n / 16), in_features / 32, 2, 16]");
  }
  const Plan<Int4Fn> plan = int4_plan(resolve(isa), five, q4k);
  at::Tensor out = at::empty({x.size(0), n}, x.options().dtype(at::kFloat));
  if (x.size(0) == 0 || n == 0) return out;
  const Activations a = quantize(x, k, five ? 16 : 8, epilogue.round);
  const int64_t groups = k / kGroup;
  const uint16_t* sc = reinterpret_cast<const uint16_t*>(scales.data_ptr());
  const int64_t tile_scales = q4k ? groups * (kSuperBytes / kSuperGroups / 2) : groups * 32;  // in 16-bit units
  run_tiles(plan, tiles.data_ptr<uint8_t>(), chunks * kChunk, sc,
            [tile_scales](const uint16_t* s, int64_t t) { return s + t * tile_scales; }, groups, a, x.size(0),
            out.data_ptr<float>(), n, epilogue);
  return out;
}

// x [rows, K] float32/bfloat16 (K a multiple of 256); tiles uint8 [ceil(n / 16), K / 32 * 6, 64]; scales uint8
// [ceil(n / 16), K / 256, 288] (layout.pack_int6k).
static at::Tensor int6_run(const at::Tensor& x_in, const at::Tensor& tiles, const at::Tensor& scales, int64_t n,
                           int64_t isa, const Epilogue& epilogue) {
  const at::Tensor x = rows_of(x_in);
  const int64_t k = x.size(1), count = (n + kTile - 1) / kTile, groups = k / kGroup;
  TORCH_CHECK(k % (kGroup * kSuperGroups) == 0, "int6_gemm: in_features must be a multiple of 256");
  TORCH_CHECK(tiles.scalar_type() == at::kByte && tiles.is_contiguous() && tiles.dim() == 3 && tiles.size(0) == count &&
                  tiles.size(1) == groups * 6 && tiles.size(2) == kChunk,
              "int6_gemm: tiles must be uint8 [ceil(n / 16), in_features / 32 * 6, 64]");
  TORCH_CHECK(scales.scalar_type() == at::kByte && scales.is_contiguous() &&
                  scales.numel() == count * (groups / kSuperGroups) * kInt6SuperBytes,
              "int6_gemm: scales must be uint8 [ceil(n / 16), in_features / 256, 288]");
  const Plan<Int4Fn> plan = int6_plan(resolve(isa));
  at::Tensor out = at::empty({x.size(0), n}, x.options().dtype(at::kFloat));
  if (x.size(0) == 0 || n == 0) return out;
  const Activations a = quantize(x, k, 32, epilogue.round, true);
  const int64_t tile_scales = groups / kSuperGroups * kInt6SuperBytes / 2;  // in 16-bit units
  run_tiles(plan, tiles.data_ptr<uint8_t>(), groups * kInt6GroupBytes,
            reinterpret_cast<const uint16_t*>(scales.data_ptr<uint8_t>()),
            [tile_scales](const uint16_t* s, int64_t t) { return s + t * tile_scales; }, groups, a, x.size(0),
            out.data_ptr<float>(), n, epilogue);
  return out;
}

// x [rows, K] float32/bfloat16; tiles uint8 [ceil(n / 16), Kp / 4, 64] (Kp: K rounded up to 32); scales float32 [n].
static at::Tensor int8_run(const at::Tensor& x_in, const at::Tensor& tiles, const at::Tensor& scales, int64_t n,
                           int64_t isa, const Epilogue& epilogue) {
  const at::Tensor x = rows_of(x_in);
  const int64_t k = x.size(1), count = (n + kTile - 1) / kTile, kp = (k + kGroup - 1) / kGroup * kGroup;
  TORCH_CHECK(tiles.scalar_type() == at::kByte && tiles.is_contiguous() && tiles.dim() == 3 && tiles.size(0) == count &&
                  tiles.size(1) * 4 == kp && tiles.size(2) == kChunk,
              "int8_gemm: tiles must be uint8 [ceil(n / 16), ceil(in_features / 32) * 8, 64]");
  TORCH_CHECK(scales.scalar_type() == at::kFloat && scales.is_contiguous() && scales.numel() == n,
              "int8_gemm: scales must be float32 [n]");
  const Plan<Int8Fn> plan = int8_plan(resolve(isa));
  at::Tensor out = at::empty({x.size(0), n}, x.options().dtype(at::kFloat));
  if (x.size(0) == 0 || n == 0) return out;
  const Activations a = quantize(x, kp, 128, epilogue.round);
  run_tiles(plan, tiles.data_ptr<uint8_t>(), kp * kTile, scales.data_ptr<float>(),
            [](const float* s, int64_t t) { return s + t * kTile; }, kp / kGroup, a, x.size(0), out.data_ptr<float>(),
            n, epilogue);
  return out;
}

static at::Tensor int4_gemm(const at::Tensor& x, const at::Tensor& tiles, const at::Tensor& scales, int64_t n,
                            int64_t isa) {
  return int4_run(x, tiles, scales, n, isa, Epilogue{});
}

static at::Tensor int8_gemm(const at::Tensor& x, const at::Tensor& tiles, const at::Tensor& scales, int64_t n,
                            int64_t isa) {
  return int8_run(x, tiles, scales, n, isa, Epilogue{});
}

static at::Tensor int5_gemm(const at::Tensor& x, const at::Tensor& tiles, const at::Tensor& scales, int64_t n,
                            int64_t isa) {
  return int4_run(x, tiles, scales, n, isa, Epilogue{}, true);
}

static at::Tensor int6_gemm(const at::Tensor& x, const at::Tensor& tiles, const at::Tensor& scales, int64_t n,
                            int64_t isa) {
  return int6_run(x, tiles, scales, n, isa, Epilogue{});
}

// ------------------------------------------------------------------------------------------------ a whole layer

// The packed layer's forward in one op (active_rag.models.quantized.PackedLinear): its float32 input rounded to
// bfloat16, the product, the output rounded to bfloat16 and the bias (float32) added, each as the unfused path's torch
// ops do it, so the outputs are identical; without them a step ran four small ops a layer besides the product.
// `bias_f` keeps the float32 bias the epilogue reads alive for the call.
static Epilogue linear_epilogue(const at::Tensor& x, const c10::optional<at::Tensor>& bias, int64_t n, at::Tensor& bias_f) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "active_rag linear: x must be float32");
  Epilogue e;
  e.round = true;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->numel() == n && bias->device().is_cpu(), "active_rag linear: bias must have out_features values");
    bias_f = bias->to(at::kFloat).contiguous();
    e.bias = bias_f.data_ptr<float>();
  }
  return e;
}

static at::Tensor int4_linear(const at::Tensor& x, const at::Tensor& tiles, const at::Tensor& scales, int64_t n,
                              const c10::optional<at::Tensor>& bias, int64_t isa) {
  at::Tensor bias_f;
  return int4_run(x, tiles, scales, n, isa, linear_epilogue(x, bias, n, bias_f));
}

static at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& tiles, const at::Tensor& scales, int64_t n,
                              const c10::optional<at::Tensor>& bias, int64_t isa) {
  at::Tensor bias_f;
  return int8_run(x, tiles, scales, n, isa, linear_epilogue(x, bias, n, bias_f));
}

static at::Tensor int5_linear(const at::Tensor& x, const at::Tensor& tiles, const at::Tensor& scales, int64_t n,
                              const c10::optional<at::Tensor>& bias, int64_t isa) {
  at::Tensor bias_f;
  return int4_run(x, tiles, scales, n, isa, linear_epilogue(x, bias, n, bias_f), true);
}

static at::Tensor int6_linear(const at::Tensor& x, const at::Tensor& tiles, const at::Tensor& scales, int64_t n,
                              const c10::optional<at::Tensor>& bias, int64_t isa) {
  at::Tensor bias_f;
  return int6_run(x, tiles, scales, n, isa, linear_epilogue(x, bias, n, bias_f));
}

at::Tensor packed_linear(int64_t kind, const at::Tensor& x, const at::Tensor& tiles, const at::Tensor& scales, int64_t n,
                         const c10::optional<at::Tensor>& bias, int64_t isa) {
  switch (kind) {
    case 4: return int4_linear(x, tiles, scales, n, bias, isa);
    case 5: return int5_linear(x, tiles, scales, n, bias, isa);
    case 6: return int6_linear(x, tiles, scales, n, bias, isa);
    case 8: return int8_linear(x, tiles, scales, n, bias, isa);
    default: TORCH_CHECK(false, "active_rag linear: kind must be 4, 5, 6 or 8, not ", kind);
  }
}

}  // namespace active_rag_kernels

TORCH_LIBRARY(active_rag, m) {
  m.def("int4_gemm(Tensor x, Tensor tiles, Tensor scales, int n, int isa=0) -> Tensor");
  m.def("int8_gemm(Tensor x, Tensor tiles, Tensor scales, int n, int isa=0) -> Tensor");
  m.def("int4_linear(Tensor x, Tensor tiles, Tensor scales, int n, Tensor? bias, int isa=0) -> Tensor");
  m.def("int8_linear(Tensor x, Tensor tiles, Tensor scales, int n, Tensor? bias, int isa=0) -> Tensor");
  m.def("int5_gemm(Tensor x, Tensor tiles, Tensor scales, int n, int isa=0) -> Tensor");
  m.def("int5_linear(Tensor x, Tensor tiles, Tensor scales, int n, Tensor? bias, int isa=0) -> Tensor");
  m.def("int6_gemm(Tensor x, Tensor tiles, Tensor scales, int n, int isa=0) -> Tensor");
  m.def("int6_linear(Tensor x, Tensor tiles, Tensor scales, int n, Tensor? bias, int isa=0) -> Tensor");
  m.def("best_isa() -> int", &active_rag_kernels::best_isa);
  m.def("isa_supported(int isa) -> bool", &active_rag_kernels::isa_supported);
}

TORCH_LIBRARY_IMPL(active_rag, CPU, m) {
  m.impl("int4_gemm", &active_rag_kernels::int4_gemm);
  m.impl("int8_gemm", &active_rag_kernels::int8_gemm);
  m.impl("int4_linear", &active_rag_kernels::int4_linear);
  m.impl("int8_linear", &active_rag_kernels::int8_linear);
  m.impl("int5_gemm", &active_rag_kernels::int5_gemm);
  m.impl("int5_linear", &active_rag_kernels::int5_linear);
  m.impl("int6_gemm", &active_rag_kernels::int6_gemm);
  m.impl("int6_linear", &active_rag_kernels::int6_linear);
}
