// .npy files: little-endian, C order. float32 '<f4', float16 '<f2', and bfloat16 stored as
// its uint16 bit patterns '<u2'.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ordo/scalar_type.hpp"

namespace ordo {

struct NpyArray {
  ScalarType dtype = ScalarType::f32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
  int64_t elements() const;
  std::string shape_text() const;  // "(2, 3)"
};

// Throws ordo::Error naming the file and what is wrong with it.
NpyArray parse_npy(const uint8_t* bytes, size_t size, const std::string& what);
NpyArray read_npy(const std::string& path);
std::vector<uint8_t> serialize_npy(const NpyArray& a);
// Writes to a temporary file in the same directory and renames it into place, so a reader
// never sees a partial file.
void write_npy_atomic(const std::string& path, const NpyArray& a);

std::string npy_descr(ScalarType t);

}  // namespace ordo
