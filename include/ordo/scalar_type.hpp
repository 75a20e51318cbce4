// ordo's scalar vocabulary, shared by the public API and the IR.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ordo {

// f64/f32: IEEE binary64/binary32. f16: IEEE binary16. bf16: the top 16 bits of a binary32.
// i64 is the index type; boolean is the result of comparisons. i32 exists only inside kernels,
// for the bit manipulation of math-library algorithms (exponent fields, ldexp).
enum class ScalarType : uint8_t { f64, f32, f16, bf16, i64, boolean, i32 };

constexpr std::string_view name(ScalarType t) {
  switch (t) {
    case ScalarType::f64: return "f64";
    case ScalarType::f32: return "f32";
    case ScalarType::f16: return "f16";
    case ScalarType::bf16: return "bf16";
    case ScalarType::i64: return "i64";
    case ScalarType::boolean: return "bool";
    case ScalarType::i32: return "i32";
  }
  return "?";
}

constexpr int size_bytes(ScalarType t) {
  switch (t) {
    case ScalarType::f64: case ScalarType::i64: return 8;
    case ScalarType::f32: case ScalarType::i32: return 4;
    case ScalarType::f16: case ScalarType::bf16: return 2;
    case ScalarType::boolean: return 1;
  }
  return 0;
}

constexpr bool is_float(ScalarType t) {
  return t == ScalarType::f64 || t == ScalarType::f32 || t == ScalarType::f16 || t == ScalarType::bf16;
}
// Types the IR computes in. f16 and bf16 are storage only: they are reached by explicit casts.
constexpr bool is_arith_float(ScalarType t) { return t == ScalarType::f64 || t == ScalarType::f32; }

inline std::optional<ScalarType> parse_scalar_type(std::string_view s) {
  for (ScalarType t : {ScalarType::f64, ScalarType::f32, ScalarType::f16, ScalarType::bf16})
    if (s == name(t)) return t;
  if (s == "float32") return ScalarType::f32;
  if (s == "float64") return ScalarType::f64;
  if (s == "float16") return ScalarType::f16;
  if (s == "bfloat16") return ScalarType::bf16;
  return std::nullopt;
}

}  // namespace ordo
