// The machine's f32 fma peak as ordo's own code reaches it: a kernel of independent fma chains
// written in ordo's IR and compiled by the same LLVM backend as every order, so it runs the
// vector width and instruction mix the JIT emits on this CPU (AVX-512 where the host has it).
// Benchmarks report their speed next to it, measured in the same process, since absolute timings
// on shared machines are noise.
#include "ordo/peak.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "backends/llvm/llvm_backend.hpp"
#include "ir/ir.hpp"
#include "ordo/ordo.hpp"

namespace ordo {

namespace {

// Each program instance runs `chains` independent chains acc = fma(acc, a, b) of `lanes` f32
// lanes for `iterations` steps and stores lane 0 of their sum (so nothing is dead code).
// 16 lanes: the widest vector any order's IR holds (fast attention's 16 query lanes).
// The chains must outnumber an fma's latency (4 cycles) times the fma ports (2) in machine
// registers, and fit the register file: 12 chains are 12 registers with AVX-512, but 24 of the
// 16 ymm registers with AVX2, where they spill (measured: about a quarter of the AVX2 EPYC's
// peak); 6 chains are 12 ymm there. measure_fma_peak takes the better of the two.
ir::Kernel peak_kernel(int lanes, int chains, int64_t iterations) {
  using namespace ir;
  Kernel k;
  k.name = "fma_peak";
  k.description = fmt::format("{} chains of {}-lane f32 fma, {} steps", chains, lanes, iterations);
  Builder b(k);
  const int out = b.buffer("out", ScalarType::f32, true, Extent::rows);
  const Type vec{ScalarType::f32, lanes};
  auto splat = [&](float v) { return broadcast(constant(Type{ScalarType::f32, 1}, v), lanes); };
  std::vector<int> acc;
  for (int j = 0; j < chains; ++j) {
    acc.push_back(b.local(fmt::format("acc{}", j), vec));
    b.assign(acc.back(), splat(0.001f * static_cast<float>(j)));
  }
  b.for_range("step", index_const(0), index_const(iterations), 1, [&](ExprRef) {
    for (int a : acc) b.assign(a, fma(b.get(a), splat(0.999999f), splat(1e-7f)));
  });
  ExprRef sum = b.get(acc[0]);
  for (int j = 1; j < chains; ++j) sum = binary(Op::Add, sum, b.get(acc[size_t(j)]));
  b.store(out, program_id(0), extract(sum, 0));
  return k;
}

}  // namespace

PeakFlops measure_fma_peak(int threads) {
  PeakFlops p;
  constexpr int kLanes = 16;
  constexpr int64_t kFlops = 1'920'000'000;  // per instance and kernel: ~2 GFLOP
  const int64_t items = threads > 0 ? threads : std::max(1u, std::thread::hardware_concurrency());
  std::vector<float> out(static_cast<size_t>(items));
  void* buffers[] = {out.data()};
  const int64_t extents[] = {items};
  double best = 0;
  for (int chains : {6, 12}) {
    const int64_t iterations = kFlops / (int64_t(chains) * kLanes * 2);
    const llvm_backend::Compiled c = llvm_backend::compile(peak_kernel(kLanes, chains, iterations));
    for (int repeat = 0; repeat < 3; ++repeat) {
      auto t0 = std::chrono::steady_clock::now();
      // One instance per thread; however the pool splits them, `items` instances run in total.
      parallel_for(items, static_cast<int>(items), [&](int64_t begin, int64_t end) { c.entry(buffers, extents, begin, end, 0); });
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, static_cast<double>(items) * iterations * chains * kLanes * 2 / s / 1e9);
    }
  }
  p.gflops = best;
  p.available = true;
  return p;
}

}  // namespace ordo
