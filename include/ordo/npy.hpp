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
// Several files as one unit: every file is written to a temporary first; only when all of
// them are complete are they renamed into place. On failure no output file is created.
void write_npy_files_atomic(const std::vector<std::pair<std::string, const NpyArray*>>& files);

std::string npy_descr(ScalarType t);

}  // namespace ordo
