// The kernel cache under contention: many threads request overlapping sets of kernels at the same
// moment, then launch what they got. scripts/hardening runs this under ThreadSanitizer, where any
// data race in compile(), the cache, the thread pool or the interpreter fails the run; the normal
// suite runs it too.
//
// What must hold (include/ordo/ordo.hpp, src/runtime.cpp):
//  * Each distinct request compiles exactly once (its machine code then comes from LLVM or from
//    the disk cache; either way compile_uncached runs once). compile() counts a miss when it
//    inserts a request into the cache and a hit when it finds one there, also while another thread
//    is still compiling it. So over a wave, misses grow by the number of distinct requests, hits by
//    every other call, and entries by the distinct requests.
//  * Every caller of one request gets the same kernel, and it works: its outputs equal, bit for
//    bit (NaN equal to NaN), those of the same request on Target::interpreter, computed up front
//    by compile_uncached(), which bypasses the cache.
//  * A request that fails is not cached: every caller gets ordo::Error and the cache keeps no
//    entry for it, so a later caller tries again.
//
// The test runs in waves. Each wave has its own distinct requests (N moves by the wave number), and
// its threads start together at a latch, so every wave begins with all threads asking for kernels
// that nobody has compiled yet. ORDO_STRESS_WAVES (default 4) and ORDO_STRESS_ROUNDS (default 2,
// how often a thread walks its share of a wave's requests) make it longer.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <latch>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ir/error.hpp"
#include "ordo/compare.hpp"
#include "ordo/ordo.hpp"

using namespace ordo;

namespace {

// More threads than the machine's 2 cores, so they are preempted at arbitrary points.
constexpr int kThreads = 16;

int env_count(const char* name, int fallback) {
  const char* s = std::getenv(name);
  return s && std::atoi(s) > 0 ? std::atoi(s) : fallback;
}

struct Case {
  Request request;
  int64_t rows;
};

Case make_case(OpKind op, const char* order, ScalarType dtype, int64_t cols, int64_t rows, Target target = Target::cpu) {
  Case c;
  c.request.op = op;
  c.request.order = order;
  c.request.x_dtype = dtype;
  c.request.cols = cols;  // N differs between cases and from every other test's requests
  c.request.has_weight = op == OpKind::layer_norm || op == OpKind::rms_norm;
  c.request.has_bias = op == OpKind::layer_norm;
  c.request.target = target;
  c.rows = rows;
  return c;
}

// Every op, reference and parameterized orders, each storage type, both targets; N moves with
// the wave (by 16, so lane and chunk boundaries stay where they are). The rms_norm case has
// enough work (9 x 4099+ elements) that its launches go through the thread pool.
std::vector<Case> distinct_cases(int wave) {
  const int64_t w = 16 * wave;
  return {
      make_case(OpKind::layer_norm, "fast", ScalarType::f32, 2053 + w, 3),
      make_case(OpKind::layer_norm, "torch1.13-cpu-avx2", ScalarType::bf16, 515 + w, 3),
      make_case(OpKind::layer_norm, "lane-welford(lanes=16,chunk=4)", ScalarType::f32, 301 + w, 2),
      make_case(OpKind::rms_norm, "fast", ScalarType::f16, 4099 + w, 9),
      make_case(OpKind::var_mean, "two-pass-pairwise", ScalarType::f32, 1031 + w, 3),
      make_case(OpKind::var_mean, "sequential-welford(acc=f64)", ScalarType::f16, 63 + w, 5),
      make_case(OpKind::softmax, "torch1.13-cpu-avx2", ScalarType::f32, 777 + w, 2),
      make_case(OpKind::log_softmax, "online", ScalarType::bf16, 129 + w, 3),
      make_case(OpKind::layer_norm, "two-pass-lanes", ScalarType::f32, 33 + w, 3, Target::interpreter),
      make_case(OpKind::softmax, "fast", ScalarType::f32, 100 + w, 2, Target::interpreter),
      make_case(OpKind::var_mean, "one-pass", ScalarType::bf16, 257 + w, 2, Target::interpreter),
  };
}

// The outputs of one launch on deterministic inputs, in ArgSpec order.
std::vector<std::vector<uint8_t>> run_outputs(const CompiledKernel& k, int64_t rows) {
  HostBuffers h = make_buffers(k, rows, 7, 0.5, 3.0);
  k.run(h.refs(rows, k.request().cols), rows);
  std::vector<std::vector<uint8_t>> outs;
  for (size_t i = 0; i < h.args.size(); ++i)
    if (h.args[i].output) outs.push_back(std::move(h.bytes[i]));
  return outs;
}

bool same_outputs(const CompiledKernel& k, const std::vector<std::vector<uint8_t>>& got,
                  const std::vector<std::vector<uint8_t>>& want) {
  if (got.size() != want.size()) return false;
  size_t o = 0;
  for (const ArgSpec& a : k.args()) {
    if (!a.output) continue;
    if (got[o].size() != want[o].size()) return false;
    if (count_identical(a.dtype, got[o], want[o]) != static_cast<int64_t>(want[o].size()) / size_bytes(a.dtype)) return false;
    ++o;
  }
  return true;
}

// Thread t walks cases [t, t + window) modulo their count, in its own shuffled order: neighbours
// overlap, and together the threads cover every case.
std::vector<size_t> share_of(int t, size_t count, int rounds) {
  const size_t window = std::max<size_t>(1, count * 2 / 3);
  std::vector<size_t> mine;
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < window; ++i) mine.push_back((static_cast<size_t>(t) + i) % count);
  std::mt19937 rng(static_cast<unsigned>(t));
  std::shuffle(mine.begin(), mine.end(), rng);
  return mine;
}

}  // namespace

TEST_CASE("many threads requesting overlapping kernels: each compiles once, every caller gets a working kernel") {
  const int waves = env_count("ORDO_STRESS_WAVES", 4), rounds = env_count("ORDO_STRESS_ROUNDS", 2);
  for (int wave = 0; wave < waves; ++wave) {
    const std::vector<Case> cases = distinct_cases(wave);
    std::vector<std::vector<std::vector<uint8_t>>> want;
    for (const Case& c : cases) {
      Request r = c.request;
      r.target = Target::interpreter;
      want.push_back(run_outputs(*compile_uncached(r), c.rows));
    }

    const CacheStats before = cache_stats();
    std::latch start(kThreads);  // every thread's first request lands at the same moment
    std::atomic<int64_t> calls{0}, wrong_outputs{0}, errors{0};
    std::vector<std::set<const CompiledKernel*>> kernels_seen(cases.size());
    std::mutex mu;
    std::string first_error;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        const std::vector<size_t> mine = share_of(t, cases.size(), rounds);
        start.arrive_and_wait();
        for (size_t i : mine) {
          try {
            KernelHandle k = compile(cases[i].request);
            ++calls;
            if (!same_outputs(*k, run_outputs(*k, cases[i].rows), want[i])) ++wrong_outputs;
            (void)cache_stats();  // a reader of the counters among the writers
            std::lock_guard<std::mutex> lock(mu);
            kernels_seen[i].insert(k.get());
          } catch (const std::exception& e) {
            ++errors;
            std::lock_guard<std::mutex> lock(mu);
            if (first_error.empty()) first_error = e.what();
          }
        }
      });
    for (std::thread& t : threads) t.join();
    const CacheStats after = cache_stats();

    INFO("wave ", wave);
    CHECK_MESSAGE(errors == 0, "first error: ", first_error);
    CHECK(wrong_outputs == 0);
    for (size_t i = 0; i < cases.size(); ++i)
      CHECK_MESSAGE(kernels_seen[i].size() == 1, "request ", cases[i].request.key());  // one kernel object: compiled once
    const uint64_t distinct = cases.size();
    CHECK(after.misses - before.misses == distinct);
    CHECK(after.hits - before.hits == static_cast<uint64_t>(calls.load()) - distinct);
    CHECK(after.entries - before.entries == distinct);
    MESSAGE(fmt::format("wave {}: {} threads, {} compile() calls over {} distinct requests", wave, kThreads, calls.load(), distinct));
  }
}

TEST_CASE("a failing request requested by many threads at once: every caller gets ordo::Error, nothing is cached") {
  Request bad = make_case(OpKind::layer_norm, "lane-welford(lanes=3)", ScalarType::f32, 64, 1).request;  // lanes must be a power of two
  const CacheStats before = cache_stats();
  std::latch start(kThreads);
  std::atomic<int> ordo_errors{0}, other{0};
  constexpr int kCallsPerThread = 20;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      start.arrive_and_wait();
      for (int i = 0; i < kCallsPerThread; ++i) {
        try {
          compile(bad);
          ++other;
        } catch (const Error& e) {
          ordo_errors += std::string(e.what()).find("must be a power of two") != std::string::npos;
        } catch (...) {
          ++other;
        }
      }
    });
  for (std::thread& t : threads) t.join();
  const CacheStats after = cache_stats();
  CHECK(other == 0);
  CHECK(ordo_errors == kThreads * kCallsPerThread);
  CHECK(after.entries == before.entries);
  // Each call either started a compile (a miss) or waited on another thread's (a hit).
  CHECK((after.hits - before.hits) + (after.misses - before.misses) == uint64_t(kThreads) * kCallsPerThread);
  CHECK(after.misses > before.misses);
}
