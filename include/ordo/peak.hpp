// The machine's measured f32 fma peak, for benchmarks that report a fraction of it.
#pragma once

namespace ordo {

struct PeakFlops {
  bool available = false;
  double gflops = 0;  // best of three runs, all threads of ordo's pool
};

// Runs 6 and then 12 independent 16-lane f32 fma chains (whichever fills the fma ports without
// spilling: 12 registers either way with AVX2 or AVX-512), written in ordo's IR and compiled by
// ordo's LLVM backend (the vector width and instructions every order's kernels get on this CPU),
// one program instance on each of `threads` threads of ordo's pool (0: every core), and returns
// the better flops per second. About 1 s.
PeakFlops measure_fma_peak(int threads);

}  // namespace ordo
