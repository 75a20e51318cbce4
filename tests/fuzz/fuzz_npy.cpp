// Fuzz target: the .npy reader (src/npy.cpp: parse_npy).
//
// Input: the bytes of a file. Each must either be rejected with ordo::Error or parse into an
// array whose data is exactly its elements times the element size, and which survives
// serialize_npy -> parse_npy unchanged (dtype, shape and data).
#include <cstddef>
#include <cstdint>

#include "fuzz_common.hpp"
#include "ordo/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ordo::NpyArray a;
  try {
    a = ordo::parse_npy(data, size, "fuzz.npy");
  } catch (const ordo::Error&) {
    return 0;
  }
  const int64_t elements = a.elements();
  if (elements < 0 || a.data.size() != static_cast<size_t>(elements) * static_cast<size_t>(ordo::size_bytes(a.dtype)))
    ordo::fuzz::broken(fmt::format("parsed shape {} has {} elements but {} data bytes", a.shape_text(), elements, a.data.size()));
  const std::vector<uint8_t> bytes = ordo::serialize_npy(a);
  ordo::NpyArray b;
  try {
    b = ordo::parse_npy(bytes.data(), bytes.size(), "round trip");
  } catch (const ordo::Error& e) {
    ordo::fuzz::broken(fmt::format("serialize_npy wrote a file parse_npy rejects ({}): {}", a.shape_text(), e.what()));
  }
  if (b.dtype != a.dtype || b.shape != a.shape || b.data != a.data)
    ordo::fuzz::broken(fmt::format("round trip changed the array: {} -> {}", a.shape_text(), b.shape_text()));
  return 0;
}
