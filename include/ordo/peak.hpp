// The machine's measured f32 fma peak, for benchmarks that report a fraction of it.
#pragma once

namespace ordo {

struct PeakFlops {
  bool available = false;  // false when the CPU lacks AVX2+FMA (the kernel is x86-specific)
  double gflops = 0;       // best of three runs, all threads of ordo's pool
};

// Runs 12 independent 8-lane fma chains on `threads` threads of ordo's pool (0: every core) and
// returns the flops per second. About 2 s.
PeakFlops measure_fma_peak(int threads);

}  // namespace ordo
