// Shared declarations of active-rag's decode kernels (decode_kernel.cpp: the ops; simd.cpp: the vector paths).
#pragma once

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>

#include <cstdint>
#include <cstring>

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
  at::Tensor xq_t, sx_t, sums_t, start_t;
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
};

// The vector paths (simd.cpp): the table of `isa`'s tile kernels ({nullptr, 0} for the scalar path and on other
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

}  // namespace active_rag_kernels
