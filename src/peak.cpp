// A small peak-FLOPs kernel: how many f32 fma flops per second this machine's cores retire when
// nothing else limits them. Benchmarks report their speed next to it (a ratio measured in the
// same process), since absolute timings on shared machines are noise.
#include "ordo/peak.hpp"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "ordo/ordo.hpp"

namespace ordo {

namespace {

#if defined(__x86_64__)
// 12 independent 8-lane fma chains: more than latency (4) x throughput (2 per cycle) needs.
__attribute__((target("avx2,fma"))) float fma_chains(int64_t iterations) {
  __m256 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm256_set1_ps(0.001f * static_cast<float>(j));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i)
    for (int j = 0; j < 12; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  __m256 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, acc[j]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}
#endif

}  // namespace

PeakFlops measure_fma_peak(int threads) {
  PeakFlops p;
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return p;
  const int64_t iterations = 20'000'000;  // 12 x 8 x 2 flops each: ~4 GFLOP per item
  const int64_t items = threads > 0 ? threads : std::max(1u, std::thread::hardware_concurrency());
  double best = 0;
  for (int repeat = 0; repeat < 3; ++repeat) {
    std::vector<float> sink(static_cast<size_t>(items));
    auto t0 = std::chrono::steady_clock::now();
    // One item per thread; however the pool splits them, `items` chains run in total.
    parallel_for(items, static_cast<int>(items), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sink[static_cast<size_t>(i)] = fma_chains(iterations);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(items) * iterations * 12 * 8 * 2 / s / 1e9);
  }
  p.gflops = best;
  p.available = true;
#else
  (void)threads;
#endif
  return p;
}

}  // namespace ordo
