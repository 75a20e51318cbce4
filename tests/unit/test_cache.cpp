// The in-memory kernel cache: the whole request is the key, and a request compiles once.
#include <doctest/doctest.h>

#include <atomic>
#include <set>
#include <thread>

#include "ir/error.hpp"
#include "ordo/compare.hpp"
#include "ordo/ordo.hpp"
#include "src/kernel_parts.hpp"

using namespace ordo;

namespace {
Request rms_fast(int64_t cols) {
  Request r;
  r.op = OpKind::rms_norm;
  r.cols = cols;
  r.order = "fast";
  return r;
}
}  // namespace

TEST_CASE("a repeated request returns the compiled kernel; any changed field compiles anew") {
  Request r = rms_fast(333);
  KernelHandle a = compile(r), b = compile(r);
  CHECK(a.get() == b.get());
  for (auto change : std::vector<void (*)(Request&)>{
           [](Request& q) { q.cols = 334; }, [](Request& q) { q.eps = 1e-6; },
           [](Request& q) { q.x_dtype = ScalarType::bf16; }, [](Request& q) { q.order = "two-pass-lanes"; },
           [](Request& q) { q.target = Target::interpreter; }, [](Request& q) { q.has_weight = false; },
           [](Request& q) { q.acc_dtype = ScalarType::f64; }}) {
    Request q = r;
    change(q);
    CHECK(compile(q).get() != a.get());
  }
}

TEST_CASE("requests that generate the same program share its machine code; compile_uncached compiles anew") {
  // torch2.15-cpu-avx2 ignores threads=T for layer_norm's forward: the same program.
  Request r;
  r.op = OpKind::layer_norm;
  r.cols = 1313;  // distinct from every other test's requests
  r.order = "torch2.15-cpu-avx2";
  Request r2 = r;
  r2.order = "torch2.15-cpu-avx2(threads=2)";
  Request other = r;
  other.order = "torch2.15-cpu-default";  // another program
  const uint64_t before = cache_stats().shared_programs;
  KernelHandle a = compile(r), b = compile(r2);
  CHECK(a.get() != b.get());  // two requests, each with its own order
  CHECK(ordo::resolved_order(*a).threads != ordo::resolved_order(*b).threads);
  CHECK(cache_stats().shared_programs == before + 1);
  compile(other);
  compile_uncached(r2);
  CHECK(cache_stats().shared_programs == before + 1);
  // The shared program computes what its own compile computes.
  HostBuffers ha = make_buffers(*a, 5, 7, 0.0, 3.0), hb = make_buffers(*b, 5, 7, 0.0, 3.0);
  a->run(ha.refs(5, r.cols), 5);
  b->run(hb.refs(5, r.cols), 5);
  CHECK(ha.get("y") == hb.get("y"));
}

TEST_CASE("concurrent requests for overlapping kernels compile each distinct request exactly once") {
  const CacheStats before = cache_stats();
  constexpr int kThreads = 8, kDistinct = 5, kRepeats = 40;
  std::vector<std::set<const CompiledKernel*>> seen(kDistinct);
  std::mutex mu;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRepeats; ++i) {
        int which = (t + i) % kDistinct;
        Request r;
        r.op = OpKind::layer_norm;
        r.cols = 1000 + which;  // distinct from every other test's requests
        r.order = "torch1.13-cpu-avx2";
        KernelHandle k = compile(r);
        std::vector<float> x(1000 + which, 1.0f), w(x.size(), 1.0f), b(x.size(), 0.0f), y(x.size()), m(1), s(1);
        const int64_t n = static_cast<int64_t>(x.size());
        k->run({{x.data(), n, ScalarType::f32}, {w.data(), n, ScalarType::f32}, {b.data(), n, ScalarType::f32},
                {y.data(), n, ScalarType::f32}, {m.data(), 1, ScalarType::f32}, {s.data(), 1, ScalarType::f32}},
               1, 1);
        if (m[0] != 1.0f || y[0] != 0.0f) ++failures;  // constant row: mean 1, y 0
        std::lock_guard<std::mutex> lock(mu);
        seen[size_t(which)].insert(k.get());
      }
    });
  for (std::thread& t : threads) t.join();
  const CacheStats after = cache_stats();
  CHECK(failures == 0);
  for (const auto& s : seen) CHECK(s.size() == 1);
  CHECK(after.misses - before.misses == kDistinct);
  CHECK(after.hits - before.hits == kThreads * kRepeats - kDistinct);
}

namespace {
// Sets the request cache's capacity for one test case and restores the previous one after it.
struct CapacityForTest {
  explicit CapacityForTest(size_t entries) : previous(cache_stats().capacity) { set_kernel_cache_capacity(entries); }
  ~CapacityForTest() { set_kernel_cache_capacity(previous); }
  size_t previous;
};

}  // namespace

TEST_CASE("past its capacity the cache drops the least recently requested kernel; a held handle still runs") {
  CapacityForTest capacity(3);
  const CacheStats before = cache_stats();
  CHECK(before.capacity == 3);
  CHECK(before.entries <= 3);  // lowering the capacity dropped the rest at once
  KernelHandle a = compile(rms_fast(2101));
  const CompiledKernel* b_first = compile(rms_fast(2102)).get();
  KernelHandle c = compile(rms_fast(2103));
  KernelHandle b_held = compile(rms_fast(2102));  // a hit: b is now the most recent, a the least
  CHECK(b_held.get() == b_first);
  compile(rms_fast(2101));  // a hit too: c is now the least recent
  compile(rms_fast(2104));  // a fourth kernel: c goes
  CacheStats now = cache_stats();
  CHECK(now.entries == 3);
  CHECK(now.evictions - before.evictions >= 1);
  CHECK(compile(rms_fast(2101)).get() == a.get());  // kept
  CHECK(compile(rms_fast(2102)).get() == b_first);  // kept
  const uint64_t misses = cache_stats().misses;
  KernelHandle c_again = compile(rms_fast(2103));  // dropped: compiled again
  CHECK(cache_stats().misses == misses + 1);
  CHECK(c_again.get() != c.get());
  // The dropped kernel still runs for the caller that holds it, and computes what its new
  // compile computes.
  HostBuffers old_out = make_buffers(*c, 4, 11, 0.0, 2.0), new_out = make_buffers(*c_again, 4, 11, 0.0, 2.0);
  c->run(old_out.refs(4, 2103), 4);
  c_again->run(new_out.refs(4, 2103), 4);
  CHECK(old_out.get("y") == new_out.get("y"));
  CHECK(cache_stats().entries == 3);
}

TEST_CASE("a program is unloaded with the last kernel that runs it; until then requests share it") {
  CapacityForTest capacity(1);
  // torch2.15-cpu-avx2 ignores threads=T for layer_norm's forward: both requests generate one program.
  Request r;
  r.op = OpKind::layer_norm;
  r.cols = 2131;  // distinct from every other test's requests
  r.order = "torch2.15-cpu-avx2";
  Request same_program = r;
  same_program.order = "torch2.15-cpu-avx2(threads=2)";
  KernelHandle held = compile(r);
  compile(rms_fast(2132));  // drops r from the cache; `held` keeps its program loaded
  uint64_t shared = cache_stats().shared_programs;
  compile(same_program);
  CHECK(cache_stats().shared_programs == shared + 1);
  HostBuffers before_unload = make_buffers(*held, 3, 5, 1.0, 2.0);
  held->run(before_unload.refs(3, r.cols), 3);
  // Now drop every handle: the program is unloaded, and the next request compiles it again.
  held.reset();
  compile(rms_fast(2133));  // drops same_program's kernel, the program's last user
  shared = cache_stats().shared_programs;
  KernelHandle fresh = compile(r);
  CHECK(cache_stats().shared_programs == shared);
  HostBuffers after_reload = make_buffers(*fresh, 3, 5, 1.0, 2.0);
  fresh->run(after_reload.refs(3, r.cols), 3);
  CHECK(after_reload.get("y") == before_unload.get("y"));
  CHECK(after_reload.get("mean") == before_unload.get("mean"));
}

TEST_CASE("the kernel cache's capacity must be at least 1") {
  CHECK_THROWS_WITH_AS(set_kernel_cache_capacity(0), "the kernel cache's capacity must be at least 1 kernel, got 0", Error);
}
