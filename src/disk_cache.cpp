// The persistent JIT cache (include/ordo/disk_cache.hpp).
//
// Entry file layout, little-endian:
//   "ORDOOBJ1"                   8 bytes
//   payload length               u64
//   SHA-256 of the payload       32 bytes
//   payload: u32 symbol length, symbol, i32 rows in flight, u64 object length, object
#include "ordo/disk_cache.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "ir/error.hpp"
#include "src/sha256.hpp"

namespace ordo::disk_cache {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'O', 'R', 'D', 'O', 'O', 'B', 'J', '1'};
constexpr size_t kHeader = 8 + 8 + 32;
constexpr const char* kSuffix = ".ordo";
constexpr const char* kLockSuffix = ".lock";  // KeyLock's file, beside the entry of the same key

std::atomic<uint64_t> hits{0}, misses{0}, rejected{0}, writes{0}, write_failures{0}, evictions{0}, scans{0};
std::mutex evict_mu;  // guards the scan record below; one eviction pass at a time in this process

// What this process knows of the directory's size: the total its last scan found, plus what it
// stored since. A scan stats every entry, so it runs only when the estimate passes the bound, or
// after this process has written an eighth of the bound since (other processes write too).
// Scanning on every store made a store cost O(entries): 4 s of system time per 1000 kernels in
// a directory of 50000 entries.
struct ScanRecord {
  std::string dir;
  uint64_t max_bytes = 0;
  uint64_t total_at_scan = 0;
  uint64_t stored_since = 0;
  bool scanned = false;
};
ScanRecord scan_record;

void put_u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
void put_u64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }

// Reads fixed-size fields from a payload, refusing to run past its end.
struct Reader {
  const std::string& s;
  size_t at = 0;
  bool ok = true;
  template <class T>
  T get() {
    T v{};
    if (at + sizeof(T) > s.size()) {
      ok = false;
      return v;
    }
    std::memcpy(&v, s.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  std::string bytes(uint64_t n) {
    if (n > s.size() - at) {
      ok = false;
      return {};
    }
    std::string out = s.substr(at, n);
    at += n;
    return out;
  }
};

fs::path entry_path(const std::string& key) { return fs::path(settings().dir) / (key + kSuffix); }

// Evicts least recently used entries until the directory holds at most 7/8 of the bound (the
// slack keeps the next stores from scanning again at once). `stored`: the bytes just written.
void evict_past_bound(uint64_t stored) {
  const Settings st = settings();
  std::lock_guard<std::mutex> lock(evict_mu);
  ScanRecord& rec = scan_record;
  if (!rec.scanned || rec.dir != st.dir || rec.max_bytes != st.max_bytes) rec = ScanRecord{st.dir, st.max_bytes};
  rec.stored_since += stored;
  const bool estimate_past_bound = rec.total_at_scan + rec.stored_since > st.max_bytes;
  if (rec.scanned && !estimate_past_bound && rec.stored_since < st.max_bytes / 8) return;
  std::error_code ec;
  struct File {
    fs::path path;
    fs::file_time_type used;
    uint64_t size;
  };
  std::vector<File> files;
  uint64_t total = 0;
  ++scans;
  for (const fs::directory_entry& e : fs::directory_iterator(st.dir, ec)) {
    if (e.path().extension() != kSuffix) continue;
    std::error_code e1, e2;
    const uint64_t size = e.file_size(e1);
    const fs::file_time_type used = e.last_write_time(e2);
    if (e1 || e2) continue;  // removed by another process meanwhile
    files.push_back({e.path(), used, size});
    total += size;
  }
  if (total > st.max_bytes) {
    const uint64_t target = st.max_bytes - st.max_bytes / 8;
    std::sort(files.begin(), files.end(), [](const File& a, const File& b) { return a.used < b.used; });
    for (const File& f : files) {
      if (total <= target) break;
      if (fs::remove(f.path, ec)) ++evictions;
      // Its lock file too, so they do not pile up. A process that still waits on the removed file
      // may then compile the key alongside another one: slower, never wrong.
      fs::path lock_file = f.path;
      fs::remove(lock_file.replace_extension(kLockSuffix), ec);
      total -= f.size;
    }
  }
  rec.scanned = true;
  rec.total_at_scan = total;
  rec.stored_since = 0;
}

}  // namespace

Settings settings() {
  Settings s;
  // ORDO_CACHE: unset, empty or 1 keeps the cache; 0 turns it off; anything else is refused
  // rather than guessed at.
  const char* on = std::getenv("ORDO_CACHE");
  const std::string on_text = on ? on : "";
  if (on_text != "" && on_text != "0" && on_text != "1")
    throw Error(fmt::format("ORDO_CACHE=\"{}\": expected 0 (no disk cache) or 1 (the default)", on_text));
  s.enabled = on_text != "0";
  if (const char* d = std::getenv("ORDO_CACHE_DIR"); d && *d) s.dir = d;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) s.dir = (fs::path(x) / "ordo").string();
  else if (const char* h = std::getenv("HOME"); h && *h) s.dir = (fs::path(h) / ".cache" / "ordo").string();
  else s.enabled = false;  // nowhere to put it
  uint64_t mb = 256;
  if (const char* m = std::getenv("ORDO_CACHE_MAX_MB"); m && *m) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(m, &end, 10);
    // At most 2^40 MiB, so that the bound in bytes fits in 64 bits.
    if (!std::isdigit(static_cast<unsigned char>(m[0])) || *end != 0 || errno == ERANGE || v > (1ull << 40))
      throw Error(fmt::format("ORDO_CACHE_MAX_MB=\"{}\" is not a whole number of MiB (default 256)", m));
    mb = v;
  }
  s.max_bytes = mb << 20;
  return s;
}

std::string key(const std::string& material) {
  const std::string d = sha256(material);
  std::string hex;
  for (unsigned char c : d) hex += fmt::format("{:02x}", c);
  return hex;
}

std::optional<Entry> load(const std::string& key) {
  const fs::path path = entry_path(key);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ++misses;
    return std::nullopt;
  }
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto reject = [&]() -> std::optional<Entry> {
    ++rejected;
    ++misses;
    std::error_code ec;
    fs::remove(path, ec);
    return std::nullopt;
  };
  std::optional<Entry> e = decode(file);
  if (!e) return reject();
  std::error_code ec;
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec);  // recently used: evicted last
  ++hits;
  return e;
}

std::string encode(const Entry& e) {
  std::string payload;
  put_u32(payload, static_cast<uint32_t>(e.symbol.size()));
  payload += e.symbol;
  put_u32(payload, static_cast<uint32_t>(e.rows_in_flight));
  put_u64(payload, e.object.size());
  payload += e.object;
  std::string file(kMagic, 8);
  put_u64(file, payload.size());
  file += sha256(payload);
  file += payload;
  return file;
}

std::optional<Entry> decode(const std::string& file) {
  if (file.size() < kHeader || std::memcmp(file.data(), kMagic, 8) != 0) return std::nullopt;
  uint64_t length = 0;
  std::memcpy(&length, file.data() + 8, 8);
  if (length != file.size() - kHeader) return std::nullopt;
  const std::string payload = file.substr(kHeader);
  if (sha256(payload) != file.substr(16, 32)) return std::nullopt;
  Reader r{payload};
  Entry e;
  e.symbol = r.bytes(r.get<uint32_t>());
  e.rows_in_flight = r.get<int32_t>();
  e.object = r.bytes(r.get<uint64_t>());
  if (!r.ok || r.at != payload.size() || e.symbol.empty() || e.object.empty() || e.rows_in_flight < 1) return std::nullopt;
  return e;
}

void store(const std::string& key, const Entry& e) {
  const Settings st = settings();
  const std::string file = encode(e);

  std::error_code ec;
  fs::create_directories(st.dir, ec);
  static std::atomic<uint64_t> serial{0};
  const fs::path final_path = fs::path(st.dir) / (key + kSuffix);
  const fs::path tmp = fs::path(st.dir) / fmt::format(".{}.tmp.{}.{}", key, ::getpid(), serial++);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(file.data(), static_cast<std::streamsize>(file.size()));
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      ++write_failures;
      return;
    }
  }
  fs::rename(tmp, final_path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    ++write_failures;
    return;
  }
  ++writes;
  evict_past_bound(file.size());
}

KeyLock::KeyLock(const std::string& key) {
  const Settings st = settings();
  std::error_code ec;
  fs::create_directories(st.dir, ec);
  fd_ = ::open((fs::path(st.dir) / (key + kLockSuffix)).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) return;
  int rc;
  do rc = ::flock(fd_, LOCK_EX);  // waits while another thread or process holds the key
  while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

KeyLock::~KeyLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor of the open file releases the lock
}

void discard(const std::string& key) {
  std::error_code ec;
  fs::remove(entry_path(key), ec);
  ++rejected;
}

Counters counters() { return Counters{hits, misses, rejected, writes, write_failures, evictions, scans}; }

Usage usage() {
  Usage u;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(settings().dir, ec)) {
    if (e.path().extension() != kSuffix) continue;
    std::error_code e1;
    const uint64_t size = e.file_size(e1);
    if (e1) continue;
    ++u.entries;
    u.bytes += size;
  }
  return u;
}

uint64_t clear() {
  uint64_t n = 0;
  std::error_code ec;
  std::vector<fs::path> victims;
  for (const fs::directory_entry& e : fs::directory_iterator(settings().dir, ec))
    if (e.path().extension() == kSuffix || e.path().extension() == kLockSuffix ||
        e.path().filename().string().find(".tmp.") != std::string::npos)
      victims.push_back(e.path());
  for (const fs::path& p : victims)
    if (fs::remove(p, ec) && p.extension() == kSuffix) ++n;
  return n;
}

}  // namespace ordo::disk_cache
