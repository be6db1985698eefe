// Shared declarations of active-rag's decode kernels (decode_kernel.cpp: the ops; simd.cpp, simd_avx512.cpp: the
// vector paths; dequant.cpp: the dense prefill's weights).
#pragma once

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <tuple>

#if defined(__x86_64__) || defined(_M_X64)
#define AR_X86 1
#include <immintrin.h>
#else
#define AR_X86 0
#endif

namespace active_rag_kernels {

constexpr int64_t kTile = 16;   // outputs per tile
constexpr int64_t kGroup = 32;  // inputs per activation scale (and per int4 weight scale)
constexpr int64_t kChunk = 64;  // bytes per chunk: 16 lanes of 4 bytes

enum : int64_t { kAuto = 0, kScalar = 1, kAvx2 = 2, kAvxVnni = 3, kAvx512Vnni = 4 };

// `isa` (kAuto: the best this CPU runs), checked against the CPU (decode_kernel.cpp).
int64_t resolve_isa(int64_t isa);

// int6 (Q6_K, layout.pack_int6k): a group's 32 inputs as six chunks, int4's four chunks of the codes' low nibbles then
// two planes of eight 64-bit masks (bit 4, then bit 5; mask 2c + h as int5's); a tile's scales are, per superblock of
// 256 inputs (16 sub-blocks of 16), kInt6SuperBytes bytes: the 16 lanes' float16 d, then for each sub-block the 16
// lanes' signed scales (int8). w = d * sc * (q - 32), q in [0, 63]; d * sc is exact in float32.
constexpr int64_t kInt6GroupBytes = 6 * kChunk;
constexpr int64_t kInt6SuperBytes = 288;
constexpr int64_t kSubBlocks = 16;  // sub-blocks of 16 inputs a superblock

static inline uint64_t int6_mask(const uint8_t* group, int plane, int64_t m) {
  uint64_t v;
  std::memcpy(&v, group + (4 + plane) * kChunk + 8 * m, sizeof v);
  return v;
}

// The step of sub-block `s` (16 inputs) of lane `l`: sc * d.
static inline float int6_step(const uint16_t* sc, int64_t s, int64_t l) {
  const uint8_t* b = reinterpret_cast<const uint8_t*>(sc) + (s / kSubBlocks) * kInt6SuperBytes;
  uint16_t dh;
  std::memcpy(&dh, b + 2 * l, sizeof dh);
  return float(int8_t(b[32 + 16 * (s % kSubBlocks) + l])) * c10::detail::fp16_ieee_to_fp32_value(dh);
}

// The 6-bit code of byte 4l + i of chunk c, nibble h (0: low, inputs 8c + i; 1: high, 8c + 4 + i).
static inline int32_t int6_code(const uint8_t* group, int64_t c, int h, int64_t l, int i) {
  const int32_t nib = (group[c * kChunk + 4 * l + i] >> (4 * h)) & 15;
  const int64_t bit = 4 * l + i;
  return nib | int32_t((int6_mask(group, 0, 2 * c + h) >> bit) & 1) << 4 | int32_t((int6_mask(group, 1, 2 * c + h) >> bit) & 1) << 5;
}

// int5: 16 when bit `j` of the group's mask `m` is set (layout.pack_int5), else 0.
static inline int32_t fifth_bit(const uint8_t* group, int64_t m, int64_t j) {
  return ((group[4 * kChunk + 8 * m + j / 8] >> (j % 8)) & 1) << 4;
}

static inline float bf16_to_float(uint16_t bits) {
  const uint32_t u = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// int4 with Q4_K's scales (layout.pack_int4k; K in the kernels' templates): a tile's scales are, per superblock of
// kSuperGroups groups (256 inputs), kSuperBytes bytes: the 16 lanes' float16 d, their float16 dmin, then for each of
// the 8 groups the 16 lanes' scales sc (one byte each, < 64), then for each group their mins m. A group's step is
// sc * d and its zero 8 * step - m * dmin (w = step * q - dmin * m = (q - 8) * step + zero): every product is exact
// in float32 (an 11-bit significand times a 6-bit integer), so the zero is rounded once whatever the order or fusing.
constexpr int64_t kSuperGroups = 8;
constexpr int64_t kSuperBytes = 320;

static inline const uint8_t* k_super(const uint16_t* sc, int64_t g) {
  return reinterpret_cast<const uint8_t*>(sc) + (g / kSuperGroups) * kSuperBytes;
}

static inline void k_step_zero(const uint16_t* sc, int64_t g, int64_t l, float& step, float& zero) {
  const uint8_t* b = k_super(sc, g);
  const int64_t j = g % kSuperGroups;
  uint16_t dh, mh;
  std::memcpy(&dh, b + 2 * l, sizeof dh);
  std::memcpy(&mh, b + 32 + 2 * l, sizeof mh);
  const float d = c10::detail::fp16_ieee_to_fp32_value(dh), dmin = c10::detail::fp16_ieee_to_fp32_value(mh);
  step = float(b[64 + 16 * j + l]) * d;
  zero = 8.0f * step - float(b[192 + 16 * j + l]) * dmin;
}

// The rows quantised: xq [rows, kp] int8 (zero past the input's end) and per group of 32 the scale sx (the group's
// absolute maximum / 127: x ~ sx * xq), the sum S of its integers as a float (int4's zero term) and -offset * S, the
// start of the group's integer sum that makes it the sum over the signed weights (the weights are stored as unsigned
// bytes q + offset: 8 for int4, 128 for int8). Precomputed so a tile's loop only broadcasts them from memory.
struct Activations {
  at::Tensor owner;  // the buffers of a call too large for the calling thread's reused block (decode_kernel.cpp)
  const int8_t* xq = nullptr;
  const float* sx = nullptr;
  const float* sums = nullptr;
  const int32_t* start = nullptr;
  const int32_t* halves = nullptr;  // int6: per group -32 times the sums of its first and second 16 integers
  int64_t kp = 0;
  int64_t groups = 0;
};

// A tile's kernel: rows [r0, r0 + rows) of the activations times the tile's 16 outputs, written to out[r * ldo + l]
// for the first `valid` lanes. int4: `scales` are the tile's bfloat16 [groups][2][16] (K: its Q4_K scales, groups / 8
// superblocks of kSuperBytes, through the same pointer type); int8: float32 [16].
using Int4Fn = void (*)(const uint8_t*, const uint16_t*, int64_t, const Activations&, int64_t, int64_t, float*, int64_t,
                        int64_t);
using Int8Fn = void (*)(const uint8_t*, const float*, int64_t, const Activations&, int64_t, int64_t, float*, int64_t,
                        int64_t);

template <typename Fn>
struct Plan {
  const Fn* table;  // table[rows - 1] runs `rows` rows in one pass
  int64_t max_rows;
  // Where a tile is better expanded once when its rows take more than one pass (int5 on AVX2 and AVX-VNNI):
  // expand(tile, groups, codes) writes `group_bytes` a group, which expanded[rows - 1] then reads in place of the tile.
  const Fn* expanded = nullptr;
  void (*expand)(const uint8_t*, int64_t, uint8_t*) = nullptr;
  int64_t group_bytes = 0;
};

// The vector paths (simd.cpp, simd_avx512.cpp): the table of `isa`'s tile kernels ({nullptr, 0} for the scalar path and on other
// machines), and one int8 row unpacked with AVX-512 (for the dense prefill; AVX-512 machines only).
Plan<Int4Fn> simd_int4_plan(int64_t isa);
Plan<Int4Fn> simd_int5_plan(int64_t isa);  // int4 tiles with a fifth bit (layout.pack_int5): w = (q - 16) * step + zero
Plan<Int4Fn> simd_int4k_plan(int64_t isa);  // int4 tiles with Q4_K's scales (layout.pack_int4k)
// int6 tiles (layout.pack_int6k; int6.cpp): every path this CPU runs, the scalar reference's bits.
Plan<Int4Fn> int6_plan(int64_t isa);
// One lane of an int6 tile dequantised (the dense prefill): w = float(q - 32) * step.
template <typename T>
void int6_row(const uint8_t* tile, const uint16_t* sc, int64_t groups, int64_t lane, T* row);
Plan<Int8Fn> simd_int8_plan(int64_t isa);
void int8_row_avx512(const uint8_t* lane_bytes, int64_t k, float* row);
void int8_row_avx512(const uint8_t* lane_bytes, int64_t k, at::BFloat16* row);
// One lane of an int4 tile (fifth: int5) dequantised with AVX-512, its `groups` groups from the tile's scales `sc`
// (the scalar reference's values and rounding; AVX-512 machines only).
template <typename T>
void int4_row_avx512(const uint8_t* tile, const uint16_t* sc, int64_t groups, int64_t lane, bool fifth, T* row);
template <typename T>
void int4k_row_avx512(const uint8_t* tile, const uint16_t* sc, int64_t groups, int64_t lane, T* row);

// The ops a decode step's layers are made of, for layers.cpp's loop (each also a torch op of its own file).
// kind: 4 (int4: bfloat16 scales, or Q4_K's as uint8), 5 (int5), 6 (int6: Q6_K) or 8 (int8): the packed layer's decode forward
// (decode_kernel.cpp's int*_linear).
at::Tensor packed_linear(int64_t kind, const at::Tensor& x, const at::Tensor& tiles, const at::Tensor& scales,
                         int64_t n, const c10::optional<at::Tensor>& bias, int64_t isa);
std::tuple<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                                                double eps, int64_t lanes);
std::tuple<at::Tensor, at::Tensor> rope_heads(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                              const at::Tensor& sin, int64_t dim);
at::Tensor decode_attention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, double scale,
                            int64_t isa);

// exp(x) for x <= 0 (a value minus the maximum of its row), branch-free so a simd loop vectorises it (attention.cpp,
// summary.cpp): x = n ln 2 + r with |r| <= ln 2 / 2, exp(r) by Cephes' expf polynomial (relative error about 1e-7),
// 2^n put in the exponent bits; x is taken as -87 below it (where exp leaves float32's normal range: e^-87 is 1.6e-38,
// nothing beside the row's maximum's 1), so there is no select in the loop for AVX2 to fail to vectorise.
#define AR_EXP_BODY(x)                                                                               \
  const float c = std::max(x, -87.0f);                                                               \
  const float n = __builtin_rintf(c * 1.44269504088896341f);                                         \
  const float r = (c - n * 0.693359375f) + n * 2.12194440e-4f;                                       \
  float p = 1.9875691500e-4f;                                                                        \
  p = p * r + 1.3981999507e-3f;                                                                      \
  p = p * r + 8.3334519073e-3f;                                                                      \
  p = p * r + 4.1665795894e-2f;                                                                      \
  p = p * r + 1.6666665459e-1f;                                                                      \
  p = p * r + 5.0000001201e-1f;                                                                      \
  p = (p * r) * r + r + 1.0f;                                                                        \
  const int32_t bits = (int32_t(n) + 127) << 23;                                                     \
  float pow2;                                                                                        \
  std::memcpy(&pow2, &bits, sizeof pow2);                                                            \
  const float e = p * pow2;

}  // namespace active_rag_kernels
