#include "ordo/npy.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>

#include "ir/error.hpp"

namespace ordo {

int64_t NpyArray::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string NpyArray::shape_text() const {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  if (shape.size() == 1) s += ",";
  return s + ")";
}

std::string npy_descr(ScalarType t) {
  switch (t) {
    case ScalarType::f32: return "<f4";
    case ScalarType::f16: return "<f2";
    case ScalarType::bf16: return "<u2";
    case ScalarType::f64: return "<f8";
    case ScalarType::i64: return "<i8";
    default: return "?";
  }
}

namespace {

// Value of 'key' in the header dict, as raw text up to the matching delimiter.
std::string dict_value(const std::string& header, const std::string& key, const std::string& what) {
  const std::string quoted[2] = {"'" + key + "'", "\"" + key + "\""};
  size_t at = std::string::npos;
  for (const std::string& q : quoted)
    if ((at = header.find(q)) != std::string::npos) {
      at += q.size();
      break;
    }
  if (at == std::string::npos) throw Error(fmt::format("{}: .npy header has no '{}'", what, key));
  at = header.find(':', at);
  if (at == std::string::npos) throw Error(fmt::format("{}: .npy header is malformed near '{}'", what, key));
  ++at;
  while (at < header.size() && header[at] == ' ') ++at;
  if (at >= header.size()) throw Error(fmt::format("{}: .npy header is truncated", what));
  char open = header[at];
  char close = open == '(' ? ')' : open == '\'' ? '\'' : open == '"' ? '"' : 0;
  if (close) {
    size_t end = header.find(close, at + 1);
    if (end == std::string::npos) throw Error(fmt::format("{}: .npy header is malformed near '{}'", what, key));
    return header.substr(at + 1, end - at - 1);
  }
  size_t end = header.find_first_of(",}", at);
  if (end == std::string::npos) throw Error(fmt::format("{}: .npy header is malformed near '{}'", what, key));
  return header.substr(at, end - at);
}

}  // namespace

NpyArray parse_npy(const uint8_t* bytes, size_t size, const std::string& what) {
  if (size < 10 || std::memcmp(bytes, "\x93NUMPY", 6) != 0) throw Error(fmt::format("{}: not a .npy file", what));
  const int major = bytes[6];
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = size_t(bytes[8]) | size_t(bytes[9]) << 8;
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) throw Error(fmt::format("{}: .npy header is truncated", what));
    header_len = size_t(bytes[8]) | size_t(bytes[9]) << 8 | size_t(bytes[10]) << 16 | size_t(bytes[11]) << 24;
    offset = 12;
  } else {
    throw Error(fmt::format("{}: .npy version {} is not supported", what, major));
  }
  if (header_len > size - offset) throw Error(fmt::format("{}: .npy header is truncated", what));
  const std::string header(reinterpret_cast<const char*>(bytes + offset), header_len);
  NpyArray a;
  const std::string descr = dict_value(header, "descr", what);
  if (descr == "<f4") a.dtype = ScalarType::f32;
  else if (descr == "<f2") a.dtype = ScalarType::f16;
  else if (descr == "<u2") a.dtype = ScalarType::bf16;
  else if (descr == "<i8") a.dtype = ScalarType::i64;  // class indices (cross_entropy's target)
  else
    throw Error(fmt::format("{}: dtype '{}' is not supported; use float32 '<f4', float16 '<f2', bfloat16 bits as uint16 '<u2', or "
                            "(class indices) int64 '<i8'",
                            what, descr));
  const std::string fortran = dict_value(header, "fortran_order", what);
  if (fortran.find("False") == std::string::npos) throw Error(fmt::format("{}: Fortran-order arrays are not supported", what));
  const std::string shape = dict_value(header, "shape", what);
  size_t pos = 0;
  int64_t total = 1;
  while (pos < shape.size()) {
    while (pos < shape.size() && (shape[pos] == ' ' || shape[pos] == ',')) ++pos;
    if (pos >= shape.size()) break;
    if (shape[pos] < '0' || shape[pos] > '9') throw Error(fmt::format("{}: .npy shape '({})' is malformed", what, shape));
    int64_t d = 0;
    while (pos < shape.size() && shape[pos] >= '0' && shape[pos] <= '9') {
      if (d > (std::numeric_limits<int64_t>::max() - 9) / 10) throw Error(fmt::format("{}: .npy shape is too large", what));
      d = d * 10 + (shape[pos++] - '0');
    }
    if (d != 0 && total > std::numeric_limits<int64_t>::max() / 16 / d) throw Error(fmt::format("{}: .npy shape is too large", what));
    total *= d;
    a.shape.push_back(d);
    if (a.shape.size() > 32) throw Error(fmt::format("{}: .npy has more than 32 dims", what));
  }
  const size_t data_offset = offset + header_len;
  const size_t need = static_cast<size_t>(total) * static_cast<size_t>(size_bytes(a.dtype));
  if (size - data_offset != need)
    throw Error(fmt::format("{}: shape {} needs {} bytes of data, the file has {}", what, a.shape_text(), need, size - data_offset));
  a.data.assign(bytes + data_offset, bytes + size);
  return a;
}

NpyArray read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(fmt::format("{}: cannot open for reading", path));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return parse_npy(bytes.data(), bytes.size(), path);
}

std::vector<uint8_t> serialize_npy(const NpyArray& a) {
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", npy_descr(a.dtype), a.shape_text());
  // Pad so the data starts on a 64-byte boundary; the header ends with a newline.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  const uint8_t magic[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, uint8_t(header.size() & 0xff), uint8_t(header.size() >> 8)};
  std::vector<uint8_t> out(sizeof magic + header.size() + a.data.size());
  std::memcpy(out.data(), magic, sizeof magic);
  std::memcpy(out.data() + sizeof magic, header.data(), header.size());
  if (!a.data.empty()) std::memcpy(out.data() + sizeof magic + header.size(), a.data.data(), a.data.size());
  return out;
}

namespace {
std::string temp_path(const std::string& path) { return fmt::format("{}.tmp.{}", path, ::getpid()); }

void write_temp(const std::string& path, const NpyArray& a) {
  const std::vector<uint8_t> bytes = serialize_npy(a);
  const std::string tmp = temp_path(path);
  std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
  if (!f) throw Error(fmt::format("{}: cannot open for writing", path));
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  f.flush();
  if (!f) {
    f.close();
    std::remove(tmp.c_str());
    throw Error(fmt::format("{}: write failed", path));
  }
}
}  // namespace

void write_npy_files_atomic(const std::vector<std::pair<std::string, const NpyArray*>>& files) {
  size_t written = 0;
  try {
    for (; written < files.size(); ++written) write_temp(files[written].first, *files[written].second);
  } catch (...) {
    for (size_t i = 0; i < written; ++i) std::remove(temp_path(files[i].first).c_str());
    throw;
  }
  for (size_t i = 0; i < files.size(); ++i) {
    if (std::rename(temp_path(files[i].first).c_str(), files[i].first.c_str()) != 0) {
      for (size_t j = i; j < files.size(); ++j) std::remove(temp_path(files[j].first).c_str());
      throw Error(fmt::format("{}: cannot move the finished file into place", files[i].first));
    }
  }
}

void write_npy_atomic(const std::string& path, const NpyArray& a) { write_npy_files_atomic({{path, &a}}); }

}  // namespace ordo
