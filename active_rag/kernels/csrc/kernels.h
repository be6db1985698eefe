// Shared declarations of active-rag's decode kernels (decode_kernel.cpp: the ops; simd.cpp, simd_avx512.cpp: the
// vector paths; dequant.cpp: the dense prefill's weights).
#pragma once

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>

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
  int64_t kp = 0;
  int64_t groups = 0;
};

// A tile's kernel: rows [r0, r0 + rows) of the activations times the tile's 16 outputs, written to out[r * ldo + l]
// for the first `valid` lanes. int4: `scales` are the tile's bfloat16 [groups][2][16]; int8: float32 [16].
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
Plan<Int8Fn> simd_int8_plan(int64_t isa);
void int8_row_avx512(const uint8_t* lane_bytes, int64_t k, float* row);
void int8_row_avx512(const uint8_t* lane_bytes, int64_t k, at::BFloat16* row);
// One lane of an int4 tile (fifth: int5) dequantised with AVX-512, its `groups` groups from the tile's scales `sc`
// (the scalar reference's values and rounding; AVX-512 machines only).
template <typename T>
void int4_row_avx512(const uint8_t* tile, const uint16_t* sc, int64_t groups, int64_t lane, bool fifth, T* row);

// The ops a decode step's layers are made of, for layers.cpp's loop (each also a torch op of its own file).
// kind: 4 (int4), 5 (int5) or 8 (int8): the packed layer's decode forward (decode_kernel.cpp's int*_linear).
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
