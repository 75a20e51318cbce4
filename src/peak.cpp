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
// 12 chains: more than an fma's latency (4 cycles) times the fma ports (2) needs.
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
  constexpr int kLanes = 16, kChains = 12;
  constexpr int64_t kIterations = 10'000'000;  // 12 x 16 x 2 flops each: ~4 GFLOP per instance
  const llvm_backend::Compiled c = llvm_backend::compile(peak_kernel(kLanes, kChains, kIterations));
  const int64_t items = threads > 0 ? threads : std::max(1u, std::thread::hardware_concurrency());
  std::vector<float> out(static_cast<size_t>(items));
  void* buffers[] = {out.data()};
  const int64_t extents[] = {items};
  double best = 0;
  for (int repeat = 0; repeat < 3; ++repeat) {
    auto t0 = std::chrono::steady_clock::now();
    // One instance per thread; however the pool splits them, `items` instances run in total.
    parallel_for(items, static_cast<int>(items), [&](int64_t begin, int64_t end) { c.entry(buffers, extents, begin, end, 0); });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(items) * kIterations * kChains * kLanes * 2 / s / 1e9);
  }
  p.gflops = best;
  p.available = true;
  return p;
}

}  // namespace ordo
