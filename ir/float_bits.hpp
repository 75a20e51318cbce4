// Bit-exact conversions between f32 and the 16-bit storage types, round-to-nearest-even.
// The interpreter, the CLI's .npy handling and the tests share these; the LLVM backend emits
// the same bf16 algorithm as IR (backends/llvm), and f16 through LLVM's fptrunc, whose
// semantics are the same RNE. cuda-emu compiles this file too, next to templates/simt_emu.hpp
// (embedded like the templates), as the host's definition of the GPU's cvt instructions: so it
// stays C++17 (the kernels' dialect), self-contained, and on C headers, which cost each of
// cuda-emu's compiles little to parse.
#pragma once

#include <stdint.h>
#include <string.h>

namespace ordo {

// An f32's bit pattern, and the f32 of a bit pattern (std::bit_cast, which is C++20).
inline uint32_t f32_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  return x;
}
inline float f32_from_bits(uint32_t x) {
  float f;
  memcpy(&f, &x, 4);
  return f;
}

inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

inline float bf16_bits_to_f32(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }

inline uint16_t f32_to_f16_bits(float f) {
  uint32_t x = f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (ax >= 0x38800000u) {                                               // normal half: >= 2^-14
    uint32_t rounded = ax + 0xfffu + ((ax >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
  }
  // Subnormal half (unit 2^-24) or zero. The scaling is exact; nearbyint rounds to even (the
  // default rounding mode, which ordo never changes).
  float scaled = f32_from_bits(ax) * 16777216.0f;
  return static_cast<uint16_t>(sign | static_cast<uint32_t>(__builtin_nearbyintf(scaled)));
}

inline float f16_bits_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in f32
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace ordo
