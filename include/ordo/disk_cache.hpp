// The persistent JIT cache: machine code of compiled kernels, kept on disk across processes.
//
// Location: $ORDO_CACHE_DIR, else $XDG_CACHE_HOME/ordo, else ~/.cache/ordo. ORDO_CACHE=0
// disables it. ORDO_CACHE_MAX_MB bounds its size (default 256): past it, the least recently
// used entries are evicted down to 7/8 of the bound. A process measures the directory when it
// first stores, when its count of the size passes the bound, and after each eighth of the bound
// it writes; other processes' writes in between may take the directory past the bound until
// then. The settings are read on every use, so they may change at run time.
//
// An entry is one file named by the SHA-256 of everything the machine code depends on: the
// ordo version, the backend's fingerprint (LLVM version, target CPU and features, code
// generation options), and the program: the printed IR without its description line, so two
// requests that generate one program (an alias and its order) share an entry. It holds
// the object code, its entry symbol, and a SHA-256 of its contents checked on every read: a
// corrupt or truncated entry is ignored, removed and rebuilt, never loaded. Entries are
// written to a temporary file and renamed into place, so processes sharing one directory see
// either a whole entry or none.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ordo::disk_cache {

struct Entry {
  std::string object;  // relocatable object code for the host
  std::string symbol;  // the kernel's entry point in it
  int rows_in_flight = 1;
};

struct Settings {
  bool enabled = true;
  std::string dir;
  uint64_t max_bytes = 0;
};
Settings settings();

// An entry file's bytes, and back (the layout is in src/disk_cache.cpp). decode returns nothing
// for anything encode did not write: a wrong magic or length, a SHA-256 that does not match, a
// field running past the payload, bytes left over, an empty symbol or object, rows in flight
// below 1. It reads only `file`, and never throws for any bytes. load() is a file read, decode,
// and the removal of a rejected file.
std::string encode(const Entry& e);
std::optional<Entry> decode(const std::string& file);

// The cache key for `material`: its SHA-256 in hex.
std::string key(const std::string& material);

// The entry for `key`, or nothing on a miss or a rejected (corrupt) entry.
std::optional<Entry> load(const std::string& key);
// Writes the entry atomically, then evicts least recently used entries past the size bound.
// Failures to write are not errors for the caller (the kernel still runs); they are counted.
void store(const std::string& key, const Entry& e);
// Removes an entry that loaded but that the backend then rejected.
void discard(const std::string& key);

// An exclusive lock on one key among every thread and process that shares the cache directory,
// held for the object's lifetime: flock(2) on an empty file <key>.lock beside the entry.
// compile_uncached holds it while it loads a key, or compiles and stores it, so that threads and
// processes asking for one new kernel at once compile it once: the others wait, then load it.
// Where no lock file can be made (no directory, a read-only one) nothing is held, and a key may
// be compiled more than once, which is slower but no less correct.
class KeyLock {
 public:
  explicit KeyLock(const std::string& key);
  ~KeyLock();
  KeyLock(const KeyLock&) = delete;
  KeyLock& operator=(const KeyLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// This process's counters.
struct Counters {
  uint64_t hits = 0, misses = 0, rejected = 0, writes = 0, write_failures = 0, evictions = 0;
  uint64_t scans = 0;  // measurements of the directory's size (see the bound above)
};
Counters counters();

// What is on disk now.
struct Usage {
  uint64_t entries = 0, bytes = 0;
};
Usage usage();
// Removes every entry; returns how many.
uint64_t clear();

}  // namespace ordo::disk_cache
