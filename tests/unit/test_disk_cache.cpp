// The persistent disk cache: a second process-level compile loads machine code from disk and
// computes the same bits; corrupt and truncated entries are rejected and rebuilt, never
// loaded; ORDO_CACHE=0 writes nothing; the size bound evicts the least recently used entry.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "ordo/compare.hpp"
#include "ordo/disk_cache.hpp"
#include "ordo/ordo.hpp"

using namespace ordo;
namespace fs = std::filesystem;

namespace {

// A fresh cache directory for one test, removed afterwards; the environment is restored.
struct ScopedCacheDir {
  fs::path dir;
  ScopedCacheDir() {
    static int serial = 0;
    dir = fs::temp_directory_path() / ("ordo_disk_cache_test." + std::to_string(::getpid()) + "." + std::to_string(serial++));
    fs::remove_all(dir);
    ::setenv("ORDO_CACHE_DIR", dir.c_str(), 1);
    ::setenv("ORDO_CACHE", "1", 1);
    ::unsetenv("ORDO_CACHE_MAX_MB");
  }
  ~ScopedCacheDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
    ::unsetenv("ORDO_CACHE_DIR");
    ::unsetenv("ORDO_CACHE");
    ::unsetenv("ORDO_CACHE_MAX_MB");
  }
  // Every file but the empty <key>.lock files of disk_cache::KeyLock: entries, and any
  // temporary file a write left behind.
  std::vector<fs::path> entries() const {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() != ".lock") out.push_back(e.path());
    return out;
  }
};

Request softmax_request() {
  Request r;
  r.op = OpKind::softmax;
  r.cols = 100;
  r.order = "torch1.13-cpu-avx2";
  return r;
}

std::vector<uint8_t> run_y(const KernelHandle& k) {
  HostBuffers h = make_buffers(*k, 9, 3, 0.0, 4.0);
  k->run(h.refs(9, k->request().cols), 9);
  return h.get("y");
}

}  // namespace

TEST_CASE("a second compile loads the kernel from disk and computes the same bits") {
  ScopedCacheDir cache;
  KernelHandle first = compile_uncached(softmax_request());
  CHECK_FALSE(first->from_disk_cache());
  REQUIRE(cache.entries().size() == 1);
  KernelHandle second = compile_uncached(softmax_request());
  CHECK(second->from_disk_cache());
  CHECK(run_y(first) == run_y(second));
  // A different request is a different entry.
  Request other = softmax_request();
  other.order = "torch1.13-cpu-default";
  CHECK_FALSE(compile_uncached(other)->from_disk_cache());
  CHECK(cache.entries().size() == 2);
}

TEST_CASE("corrupt and truncated entries are rejected and rebuilt") {
  ScopedCacheDir cache;
  KernelHandle good = compile_uncached(softmax_request());
  const std::vector<uint8_t> want = run_y(good);
  REQUIRE(cache.entries().size() == 1);
  const fs::path entry = cache.entries()[0];
  const auto size = fs::file_size(entry);

  for (const char* damage : {"flip a byte of the object", "truncate", "empty file", "wrong magic"}) {
    INFO(damage);
    std::string bytes;
    {
      std::ifstream in(entry, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    REQUIRE(bytes.size() == size);
    const std::string d = damage;
    if (d == "flip a byte of the object") bytes[bytes.size() / 2] ^= 0x5a;
    if (d == "truncate") bytes.resize(bytes.size() / 2);
    if (d == "empty file") bytes.clear();
    if (d == "wrong magic") bytes[0] = 'X';
    {
      std::ofstream out(entry, std::ios::binary | std::ios::trunc);
      out << bytes;
    }
    const uint64_t rejected = disk_cache::counters().rejected;
    KernelHandle rebuilt = compile_uncached(softmax_request());
    CHECK_FALSE(rebuilt->from_disk_cache());
    CHECK(disk_cache::counters().rejected == rejected + 1);
    CHECK(run_y(rebuilt) == want);
    CHECK(fs::file_size(entry) == size);  // rewritten whole
    CHECK(compile_uncached(softmax_request())->from_disk_cache());
  }
}

TEST_CASE("ORDO_CACHE=0 neither reads nor writes") {
  ScopedCacheDir cache;
  ::setenv("ORDO_CACHE", "0", 1);
  compile_uncached(softmax_request());
  CHECK_FALSE(compile_uncached(softmax_request())->from_disk_cache());
  CHECK(cache.entries().empty());
}

TEST_CASE("a store measures the directory only when its count of the size nears the bound") {
  ScopedCacheDir cache;
  ::setenv("ORDO_CACHE_MAX_MB", "1", 1);
  const std::string small(10 * 1024, 's');
  const uint64_t before = disk_cache::counters().scans, evicted = disk_cache::counters().evictions;
  disk_cache::store("first", {small, "sym", 1});
  CHECK(disk_cache::counters().scans == before + 1);  // the first store in this directory
  for (const char* key : {"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11"})
    disk_cache::store(key, {small, "sym", 1});
  CHECK(disk_cache::counters().scans == before + 1);  // 120 KiB since: under an eighth of 1 MiB
  disk_cache::store("s12", {small, "sym", 1});  // 130 KiB since: past an eighth
  CHECK(disk_cache::counters().scans == before + 2);
  CHECK(disk_cache::counters().evictions == evicted);  // 130 KiB in all: nothing to evict
  CHECK(cache.entries().size() == 14);
}

TEST_CASE("past the size bound the least recently used entry is evicted") {
  ScopedCacheDir cache;
  ::setenv("ORDO_CACHE_MAX_MB", "1", 1);
  const std::string blob(400 * 1024, 'x');  // three of these exceed 1 MiB, two do not
  disk_cache::store("a", {blob, "sym", 1});
  disk_cache::store("b", {blob, "sym", 1});
  // Make "a" recently used: a read refreshes its time. File times have coarse resolution on
  // some filesystems, so age the others explicitly.
  fs::last_write_time(cache.dir / "b.ordo", fs::file_time_type::clock::now() - std::chrono::hours(1));
  fs::last_write_time(cache.dir / "a.ordo", fs::file_time_type::clock::now() - std::chrono::hours(2));
  REQUIRE(disk_cache::load("a").has_value());
  const uint64_t evicted = disk_cache::counters().evictions;
  disk_cache::store("c", {blob, "sym", 1});
  CHECK(disk_cache::counters().evictions == evicted + 1);
  CHECK(fs::exists(cache.dir / "a.ordo"));
  CHECK_FALSE(fs::exists(cache.dir / "b.ordo"));
  CHECK(fs::exists(cache.dir / "c.ordo"));
  CHECK(disk_cache::clear() == 2);
  CHECK(cache.entries().empty());
}
