// The in-memory kernel cache: the whole request is the key, and a request compiles once.
#include <doctest/doctest.h>

#include <atomic>
#include <set>
#include <thread>

#include "ordo/ordo.hpp"

using namespace ordo;

TEST_CASE("a repeated request returns the compiled kernel; any changed field compiles anew") {
  Request r;
  r.op = OpKind::rms_norm;
  r.cols = 333;
  r.order = "fast";
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
