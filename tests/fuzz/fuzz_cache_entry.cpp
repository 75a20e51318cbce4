// Fuzz target: the disk-cache entry reader (src/disk_cache.cpp: decode, which load() applies to
// every file it reads).
//
// An entry is "ORDOOBJ1", the payload length (u64), the payload's SHA-256, then the payload:
// u32 symbol length, symbol, i32 rows in flight, u64 object length, object. A random file almost
// never carries a matching SHA-256, so the first byte of the input chooses what the rest is:
//   even: the whole file, as found on disk (magic, length and hash checks);
//   odd:  a payload, framed here with the right magic, length and SHA-256, so that the payload's
//         own fields (lengths that run past the end, bytes left over, empty fields) are reached.
//
// Promises checked, for any bytes:
//  * decode returns an entry or nothing, and never crashes or throws;
//  * an entry it returns is one encode writes byte for byte: the format has one spelling, so a
//    file that decodes is exactly the encoding of what it decoded to;
//  * and it is usable: a symbol, an object, rows in flight >= 1.
// Entries are never loaded into the JIT here: only hash-verified files written by store() reach
// llvm_backend::load_object, and the hash is an integrity check, not a defence against a forger.
#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_common.hpp"
#include "ordo/disk_cache.hpp"
#include "src/sha256.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string file;
  if (data[0] % 2 == 0) {
    file = rest;
  } else {
    file = "ORDOOBJ1";
    const uint64_t length = rest.size();
    file.append(reinterpret_cast<const char*>(&length), 8);  // little-endian on the hosts ordo runs on
    file += ordo::sha256(rest);
    file += rest;
  }
  std::optional<ordo::disk_cache::Entry> e;
  try {
    e = ordo::disk_cache::decode(file);
  } catch (const std::exception& ex) {
    ordo::fuzz::broken(fmt::format("disk_cache::decode threw: {}", ex.what()));
  }
  if (!e) return 0;
  if (e->symbol.empty() || e->object.empty() || e->rows_in_flight < 1)
    ordo::fuzz::broken(fmt::format("decode returned an unusable entry: symbol '{}', {} object bytes, {} rows in flight", e->symbol,
                                   e->object.size(), e->rows_in_flight));
  if (ordo::disk_cache::encode(*e) != file)
    ordo::fuzz::broken(fmt::format("a file decodes to an entry whose encoding differs from it ({} bytes)", file.size()));
  return 0;
}
