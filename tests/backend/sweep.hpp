// The backend sweep shared by every backend's test: which N, which input rows, which order
// variants, and running one request on one target. test_interpreter_vs_backends.cpp (cpu) and
// test_cuda_emu.cpp (cuda-emu) compare the same cases against the interpreter.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "gen/gen.hpp"
#include "ir/error.hpp"
#include "ir/float_bits.hpp"
#include "ir/ir.hpp"
#include "ordo/compare.hpp"
#include "ordo/ordo.hpp"

namespace ordo::backend_sweep {

// How much of each sweep runs, from ORDO_BACKEND_SWEEP (tests/CMakeLists.txt registers each
// backend test in two tiers, like the reference tests, tests/reference/tiers.py):
//   reduced  the sanitizer build in scripts/hardening, whose interpreter runs ~10x slower: one N
//            per regime (below a vector, exact vectors, a tail, several chunks, a long row).
//   (unset)  the CI tier: each side of the vector and chunk boundaries once, and the long row.
//   full     every boundary (scripts/test --full); cuda-emu also runs the CPU backend's N.
enum class SweepTier { reduced, ci, full };
inline SweepTier sweep_tier() {
  const char* v = std::getenv("ORDO_BACKEND_SWEEP");
  const std::string s = v ? v : "";
  if (s.empty()) return SweepTier::ci;
  if (s == "reduced") return SweepTier::reduced;
  if (s == "full") return SweepTier::full;
  // A misspelt tier must not quietly run another one.
  std::fprintf(stderr, "ORDO_BACKEND_SWEEP='%s': expected reduced, full, or unset (the CI tier)\n", s.c_str());
  std::exit(2);
}
inline bool reduced_sweep() { return sweep_tier() == SweepTier::reduced; }
inline bool full_sweep() { return sweep_tier() == SweepTier::full; }

inline const std::vector<int64_t> kFullSweepN = {1, 2, 7, 8, 9, 15, 16, 17, 127, 128, 129, 255, 256, 4095, 4096, 4097, 65537};
inline const std::vector<int64_t> kCiSweepN = {1, 2, 7, 8, 9, 16, 17, 128, 129, 256, 4097, 65537};
inline const std::vector<int64_t> kReducedSweepN = {1, 7, 8, 17, 129, 4097};
inline const std::vector<int64_t>& sweep_n() {
  switch (sweep_tier()) {
    case SweepTier::reduced: return kReducedSweepN;
    case SweepTier::full: return kFullSweepN;
    default: return kCiSweepN;
  }
}
// cuda-emu, where every kernel is a host-compiler run (about a second, several for the 16-bit
// cascades): below a vector, a whole number of vectors of either width, a tail, several vectors
// with a tail, and the longest row. The IR tests check the CUDA targets' warp layouts against
// the one-thread kernels on every width up to 16384 (test_ir).
inline const std::vector<int64_t> kEmuSweepN = {1, 7, 16, 17, 129, 65537};
inline const std::vector<int64_t>& emu_sweep_n() {
  switch (sweep_tier()) {
    case SweepTier::reduced: return kReducedSweepN;
    case SweepTier::full: return kFullSweepN;
    default: return kEmuSweepN;
  }
}
// The widths cuda-emu runs for the `variant`-th (order, dtype, ...) variant of a sweep. The CI tier
// gives each variant every other width of kEmuSweepN, alternating from one variant to the next:
// {1, 16, 129} (below a vector, whole vectors, several with a tail) or {7, 17, 65537} (below a
// vector, a tail, the long row). Every width still meets half of the variants, at half the
// host-compiler runs, which are most of the test's time. The other tiers run all of theirs.
inline std::vector<int64_t> emu_widths(size_t variant) {
  if (sweep_tier() != SweepTier::ci) return emu_sweep_n();
  std::vector<int64_t> out;
  for (size_t i = 0; i < kEmuSweepN.size(); ++i)
    if ((i + variant) % 2 == 0) out.push_back(kEmuSweepN[i]);
  return out;
}
constexpr int64_t kRows = 7;  // not a multiple of 2 or 4: both the rows-in-flight groups and the remainder run

// Row r of x: 0 N(0,1); 1 offset 1e4, spread 1e-3; 2 spread 1e3 with zeros of both signs;
// 3 tiny values (squares underflow to subnormals); 4 NaN and Inf; 5 all equal; 6 N(-3, 0.5).
inline std::vector<uint8_t> sweep_x(ScalarType t, int64_t n) {
  std::vector<uint8_t> x;
  const double params[kRows][2] = {{0, 1}, {1e4, 1e-3}, {0, 1e3}, {0, 1e-20}, {0, 1}, {2.5, 0}, {-3, 0.5}};
  for (int64_t r = 0; r < kRows; ++r) {
    std::vector<uint8_t> row = random_values(t, n, static_cast<uint64_t>(r + 1), params[r][0], params[r][1]);
    auto set = [&](int64_t i, float v) {
      if (i >= n) return;
      if (t == ScalarType::f32) std::memcpy(row.data() + 4 * i, &v, 4);
      else {
        uint16_t h = t == ScalarType::bf16 ? f32_to_bf16_bits(v) : f32_to_f16_bits(v);
        std::memcpy(row.data() + 2 * i, &h, 2);
      }
    };
    if (r == 2) { set(0, 0.0f); set(n / 2, -0.0f); }
    if (r == 4) { set(n / 3, NAN); set(n - 1, INFINITY); }
    x.insert(x.end(), row.begin(), row.end());
  }
  return x;
}

// Element `at` of a buffer of `dtype` set to v (rounded to a 16-bit type): the special values the
// attention sweeps plant in their inputs.
inline void set_value(std::vector<uint8_t>& b, ScalarType dtype, int64_t at, float v) {
  if (dtype == ScalarType::f32) {
    std::memcpy(b.data() + 4 * at, &v, 4);
  } else {
    const uint16_t bits = dtype == ScalarType::bf16 ? f32_to_bf16_bits(v) : f32_to_f16_bits(v);
    std::memcpy(b.data() + 2 * at, &bits, 2);
  }
}

struct Variant {
  std::string order;
  ScalarType dtype;
  std::optional<ScalarType> weight_dtype;
  bool weight, bias;
  int rows_in_flight = 0;  // 0: the backend's choice
};

inline std::vector<Variant> variants(OpKind op) {
  std::vector<Variant> out;
  std::vector<std::string> names;
  for (const gen::NamedOrder& n : gen::named_orders())
    for (OpKind o : n.ops)
      if (o == op && !n.device_only) {  // device-only orders run on a GPU alone (test_cuda_static checks their PTX)
        for (ScalarType t : n.dtypes) out.push_back({std::string(n.name), t, std::nullopt, true, true});
        names.emplace_back(n.name);
      }
  // Parameterized variants: fused updates, other lane counts, f64 accumulation.
  const bool softmax = op == OpKind::softmax || op == OpKind::log_softmax;
  const std::vector<std::string> params =
      op == OpKind::silu || op == OpKind::gelu_tanh
          ? std::vector<std::string>{}  // their orders take no parameters but threads=T (silu_chunks_vs_interpreter)
      : softmax ? std::vector<std::string>{"online(lanes=4)", "online(lanes=1)", "fast(lanes=8)"}
      : op == OpKind::rms_norm || op == OpKind::sum || op == OpKind::mean
          ? std::vector<std::string>{"two-pass-lanes(accumulators=3,fma=all)", "two-pass-pairwise(lanes=4,block=64)",
                                     "two-pass-lanes(acc=f64)"}
          : std::vector<std::string>{"lane-welford(fma=all)", "lane-welford(lanes=16,chunk=4,acc=f64)",
                                     "sequential-welford(acc=f64)", "two-pass-lanes(accumulators=3,fma=all)",
                                     "two-pass-pairwise(lanes=4,block=64)"};
  for (const std::string& p : params) out.push_back({p, ScalarType::f32, std::nullopt, true, true});
  if (op == OpKind::layer_norm || op == OpKind::rms_norm) {
    out.push_back({"fast", ScalarType::bf16, ScalarType::f32, true, op == OpKind::layer_norm});  // mixed dtypes
    // PyTorch 2.15's mixed paths: f32 statistics, the scalar tail fused for f16 input; Llama's
    // promoted f32 output.
    out.push_back({op == OpKind::layer_norm ? "torch2.15-cpu-avx2" : "llama-rmsnorm-torch2.15-cpu-avx2", ScalarType::f16,
                   ScalarType::f32, true, op == OpKind::layer_norm});
    out.push_back({op == OpKind::layer_norm ? "torch2.15-cpu-default" : "gemma-rmsnorm-torch2.15-cpu-default", ScalarType::bf16,
                   ScalarType::f32, true, false});
    out.push_back({"fast", ScalarType::f32, std::nullopt, false, false});
  }
  // Rows in lock step, including a group size that does not divide kRows (the clamped tail).
  const std::string lane_order = op == OpKind::rms_norm ? "fast" : softmax ? "torch1.13-cpu-default" : "lane-welford";
  out.push_back({lane_order, ScalarType::f32, std::nullopt, true, op == OpKind::layer_norm, 2});
  out.push_back({lane_order, ScalarType::bf16, std::nullopt, true, op == OpKind::layer_norm, 3});
  out.push_back({softmax ? "torch1.13-cpu-avx2" : "two-pass-sequential", ScalarType::f32, std::nullopt, true, op == OpKind::layer_norm, 1});
  if (op == OpKind::layer_norm) {
    out.push_back({"torch1.13-cpu-avx2", ScalarType::f32, std::nullopt, true, true, 3});
    out.push_back({"torch1.13-cpu-avx2", ScalarType::f32, std::nullopt, false, false});
    out.push_back({"torch1.13-cpu-default", ScalarType::f32, std::nullopt, true, false});
  }
  return out;
}

// Whether `r` builds a kernel already compared on `target`. An alias (torch2.15-cpu), or an order
// whose kernel for this op is another's (torch2.15-cpu-avx512's layer_norm is its avx2 one), gives
// the same bits on every backend, so each distinct kernel is compared once. The key is the
// printed IR without its description line (which names the order), and the launch choices the
// backend takes from the request.
inline bool seen_kernel(Request r, Target target, std::set<std::string>& seen) {
  r.target = target;
  ir::Kernel k = gen::build(r, gen::resolve(r));
  k.description.clear();
  return !seen.insert(fmt::format("{} rows_in_flight={}\n{}", name(target), r.rows_in_flight, ir::print(k))).second;
}

// Runs one request on `target`; returns every output.
inline std::vector<std::vector<uint8_t>> run_on(Request r, Target target, const std::vector<uint8_t>& x,
                                         CompiledKernel::Stores stores = CompiledKernel::Stores::automatic) {
  r.target = target;
  KernelHandle k = compile(r);
  HostBuffers h = make_buffers(*k, kRows, 9, 0, 1);
  h.get("x") = x;
  k->run(h.refs(kRows, r.cols), kRows, 0, stores);
  std::vector<std::vector<uint8_t>> outs;
  for (size_t i = 0; i < h.args.size(); ++i)
    if (h.args[i].output) outs.push_back(h.bytes[i]);
  return outs;
}

// Every output of `r` (on r.target) over `rows` instances of make_buffers' inputs for `seed`,
// `offset` and `scale`, in argument order; `prepare`, if given, changes the inputs first (specials).
inline std::vector<std::vector<uint8_t>> outputs_of(const Request& r, int64_t rows, uint64_t seed, double offset, double scale,
                                                    const std::function<void(HostBuffers&)>& prepare = {}) {
  KernelHandle k = compile(r);
  HostBuffers h = make_buffers(*k, rows, seed, offset, scale);
  if (prepare) prepare(h);
  k->run(h.refs(rows, r.cols), rows);
  std::vector<std::vector<uint8_t>> outs;
  for (size_t a = 0; a < h.args.size(); ++a)
    if (h.args[a].output) outs.push_back(h.bytes[a]);
  return outs;
}

// r's outputs over `rows` instances of outputs_of's inputs, on the interpreter (the
// specification) and on `target`.
inline std::array<std::vector<std::vector<uint8_t>>, 2> on_interpreter_and(Request r, Target target, int64_t rows, uint64_t seed,
                                                                           double offset, double scale,
                                                                           const std::function<void(HostBuffers&)>& prepare = {}) {
  std::array<std::vector<std::vector<uint8_t>>, 2> outs;
  r.target = Target::interpreter;
  outs[0] = outputs_of(r, rows, seed, offset, scale, prepare);
  r.target = target;
  outs[1] = outputs_of(r, rows, seed, offset, scale, prepare);
  return outs;
}

// on_interpreter_and, then every output of `target` checked bit for bit against the interpreter's;
// `what` names the case in a failure.
inline void check_on_interpreter_and(const Request& r, Target target, int64_t rows, uint64_t seed, double offset, double scale,
                                     const std::function<void(HostBuffers&)>& prepare, const std::string& what) {
  const auto outs = on_interpreter_and(r, target, rows, seed, offset, scale, prepare);
  KernelHandle k = compile(r);
  size_t o = 0;
  for (const ArgSpec& a : k->args()) {
    if (!a.output) continue;
    INFO(fmt::format("{} target={} output={}", what, name(target), a.name));
    CHECK(count_identical(a.dtype, outs[1][o], outs[0][o]) == a.elements(rows, r.cols));
    ++o;
  }
}

// silu, gelu_tanh and their backward ops under the torch2.15 orders on T threads (gen/ops/pointwise.cpp):
// launches of at least 32768 elements (gelu_tanh: over 16384) cut into T chunks whose scalar tails
// fall inside rows, at row ends and across several rows, and (inner_loop=row) a tail per row's
// part of each chunk; `target` against the interpreter, bitwise. Returns the cases compared.
inline int silu_chunks_vs_interpreter(Target target) {
  int cases = 0;
  for (OpKind op : {OpKind::silu, OpKind::silu_backward, OpKind::gelu_tanh, OpKind::gelu_tanh_backward})
  for (const char* order : {"torch2.15-cpu-avx512(threads=3)", "torch2.15-cpu-avx2(threads=2)", "torch2.15-cpu-avx2(threads=2,inner_loop=row)",
                            "torch2.15-cpu-avx512(inner_loop=row)"})
    for (ScalarType t : {ScalarType::f32, ScalarType::bf16})
      for (auto [rows, n] : {std::pair<int64_t, int64_t>{1, 40000}, {3, 33333}, {7, 4999}, {2, 16389}, {40, 1000}, {1, 16385}, {3, 5463}}) {
        Request r;
        r.op = op;
        r.cols = n;
        r.order = order;
        r.x_dtype = t;
        const auto outs = on_interpreter_and(r, target, rows, 13, 0.0, 8.0);
        INFO(fmt::format("{} order={} dtype={} rows={} N={} target={}", name(op), order, name(t), rows, n, name(target)));
        CHECK(count_identical(t, outs[0][0], outs[1][0]) == rows * n);
        ++cases;
      }
  return cases;
}

// Orders whose rounding depends on the launch's row count (grid_extent): torch-decomp-cpu-avx2
// in bf16 rounds its rsqrt once inside 16-row vectors. `target` against the interpreter, bitwise,
// for each row count in `rows_list` (both sides of the boundary) and three N.
inline void launch_dependent_vs_interpreter(Target target, const std::vector<int64_t>& rows_list) {
  for (int64_t rows : rows_list) {
    for (int64_t n : {7, 64, 1000}) {
      Request r;
      r.op = OpKind::layer_norm;
      r.cols = n;
      r.order = "torch-decomp-cpu-avx2";
      r.x_dtype = ScalarType::bf16;
      const auto outs = on_interpreter_and(r, target, rows, 5, 0.5, 2.0);
      for (size_t o = 0; o < outs[0].size(); ++o) {
        INFO(fmt::format("rows={} N={} target={} output {}", rows, n, name(target), o));
        CHECK(count_identical(ScalarType::bf16, outs[0][o], outs[1][o]) == static_cast<int64_t>(outs[0][o].size() / 2));
      }
    }
  }
}

// rms_norm as PyTorch sums a single long row on T threads (Order::threads, gen/ops/rms_norm.cpp): a
// launch of one row takes the per-thread chunks, a launch of two does not. `target` against the
// interpreter, bitwise, on both sides of the 32768 split grain and for slot rows on the scalar
// (T = 3) and vector (T = 9) paths.
inline void thread_split_vs_interpreter(Target target) {
  for (OpKind op : {OpKind::rms_norm, OpKind::sum, OpKind::mean})
  for (int threads : {3, 9})
    for (int64_t n : {32768, 32769, 70001})
      for (int64_t rows : {1, 2})
        for (ScalarType t : {ScalarType::f32, ScalarType::bf16}) {
          const std::vector<ScalarType>& have = gen::dtypes_for(*gen::find_order("torch2.15-cpu-avx2"), op);
          if (std::find(have.begin(), have.end(), t) == have.end()) continue;  // sum: f32 rows only
          Request r;
          r.op = op;
          r.cols = n;
          r.order = fmt::format("torch2.15-cpu-avx2(threads={})", threads);
          r.x_dtype = t;
          r.has_weight = op == OpKind::rms_norm;
          const auto outs = on_interpreter_and(r, target, rows, 9, 0.5, 2.0);
          for (size_t o = 0; o < outs[0].size(); ++o) {
            INFO(fmt::format("{} threads={} N={} rows={} dtype={} target={} output {}", name(op), threads, n, rows, name(t), name(target), o));
            const int64_t bytes = static_cast<int64_t>(outs[0][o].size()), width = t == ScalarType::f32 ? 4 : 2;
            CHECK(count_identical(t, outs[0][o], outs[1][o]) == bytes / width);
          }
        }
}

// The inductor2.15 orders on T threads (gen/blocks/reductions.cpp split_launch): a launch of one row of
// N >= 512 T, or of R rows whose row loop has over 300 R vector steps, splits each row's sums and
// Welford between the threads, with per-thread stacks (70001: two Welford chunks per part at
// T = 2 on AVX2's 8 lanes). `target` against the interpreter, bitwise, on launches that split and
// launches of the same kernel that do not. `reduced` (cuda-emu, a host compile per kernel): one
// thread count and f32 only.
inline void inductor_split_vs_interpreter(Target target, bool reduced) {
  int cases = 0;
  for (int threads : reduced ? std::vector<int>{2} : std::vector<int>{2, 3})
    for (OpKind op : {OpKind::layer_norm, OpKind::rms_norm, OpKind::softmax, OpKind::log_softmax})
      for (int64_t n : {1024, 4900, 70001})
        for (ScalarType t : reduced ? std::vector<ScalarType>{ScalarType::f32} : std::vector<ScalarType>{ScalarType::f32, ScalarType::bf16}) {
          Request r;
          r.op = op;
          r.cols = n;
          r.order = fmt::format("inductor2.15-cpu-avx2(threads={})", threads);
          r.x_dtype = t;
          r.has_weight = op == OpKind::layer_norm || op == OpKind::rms_norm;
          r.has_bias = op == OpKind::layer_norm;
          for (int64_t rows : {1, 2, 3}) {
            const auto outs = on_interpreter_and(r, target, rows, 11, 0.5, 2.0);
            for (size_t o = 0; o < outs[0].size(); ++o) {
              INFO(fmt::format("{} threads={} N={} rows={} dtype={} target={} output {}", name(op), threads, n, rows, name(t), name(target), o));
              CHECK(outs[0][o] == outs[1][o]);  // byte for byte (these inputs hold no NaN)
            }
            ++cases;
          }
        }
  MESSAGE(fmt::format("inductor thread splits: {} (op, N, threads, dtype, rows) cases compared bitwise", cases));
}

// Attention on `target` against the interpreter: every order (and flash variants) the target can
// run, on shapes across the query-lane and key-group boundaries (S_q, S_k not multiples of 8,
// S_q != S_k, one key, one query), causal and not, with the lse output, on inputs that include a
// wide range, NaN and Inf. Returns the number of cases compared.
inline int attention_vs_interpreter(Target target, bool reduced) {
  struct Shape {
    int64_t sq, sk, d;
  };
  // D = 72: past 64 and not a multiple of it (a block of 64 dims then one of 8; torch1.13-cpu-math's
  // p @ v once read and wrote past the row there). The 16-bit key blocks are widened 32, 16 or 8
  // values per step by whichever divides S_k * D: 9 x 72 takes 8, 5 x 16 takes 16, the rest 32.
  std::vector<Shape> shapes = {{1, 1, 32}, {7, 17, 32}, {17, 7, 64}, {9, 70, 32}, {16, 16, 128}, {5, 9, 72}, {3, 5, 16}};
  if (reduced) shapes = {{7, 17, 32}, {17, 7, 64}};
  std::vector<std::pair<std::string, ScalarType>> orders;
  for (const gen::NamedOrder& n : gen::named_orders())
    for (OpKind o : n.ops)
      if (o == OpKind::attention)
        for (ScalarType t : n.dtypes) orders.emplace_back(std::string(n.name), t);
  for (const char* p : {"flash(16)", "flash(bc=8,exp2=on,scale=multiply,fma=all)", "flash(bc=32,queries=4)", "flash(bc=16,queries=1)"})
    orders.emplace_back(p, ScalarType::f32);
  // PyTorch's CPU attention on several threads, launched as one (batch, head): the MKL calls its
  // threads split (gen/libraries/mkl_gemm.cpp).
  for (ScalarType t : {ScalarType::f32, ScalarType::bf16}) orders.emplace_back("torch2.15-cpu-avx512(threads=2)", t);
  // Each host's MKL model whatever the host: on 2 threads as one (batch, head) (MKL threaded), and on
  // 3 threads with 3 instances, where each instance's output rows sit in another thread's scratch
  // (the AMD model peels by that alignment, chosen by program_id).
  for (const char* mkl : {"amd", "intel"}) {
    for (ScalarType t : {ScalarType::f32, ScalarType::bf16})
      for (const char* threads : {"threads=2,", "threads=3,"}) orders.emplace_back(fmt::format("torch2.15-cpu-avx512({}mkl={})", threads, mkl), t);
    orders.emplace_back(fmt::format("torch2.15-cpu-math-avx512(threads=2,mkl={})", mkl), ScalarType::f32);
  }
  // An Intel host with avx512_bf16 (its sgemm is the Intel model's): gemm_bf16bf16f32's vdpbf16ps
  // kernels, whose pair chains flush subnormals, and the 2-thread K split of one query row's p @ v.
  for (const char* threads : {"", "threads=2,", "threads=3,"})
    orders.emplace_back(fmt::format("torch2.15-cpu-avx512({}mkl=intel-avx512bf16)", threads), ScalarType::bf16);
  // The 16-bit composite (ATen's own products, its vectorized dot) whatever the host, each lane
  // fold once (on a host without AVX-512 the named rows above run both in both dtypes).
  orders.emplace_back("torch2.15-cpu-math-avx2(onednn=off)", ScalarType::bf16);
  orders.emplace_back("torch2.15-cpu-math-default(onednn=off)", ScalarType::f16);
  // bf16 by oneDNN's emulated kernel on 2 threads: one-row calls chosen by program_id and grid_extent.
  orders.emplace_back("torch2.15-cpu-math-avx512(threads=2,onednn=emulated)", ScalarType::bf16);
  // bf16 by oneDNN's kernels on avx512_bf16 (brgemm's pair chains, the gemv kernels, the flush of
  // the conversion) whatever the host.
  orders.emplace_back("torch2.15-cpu-math-avx512(threads=2,onednn=on)", ScalarType::bf16);
  // f16 by oneDNN's kernels on avx512_fp16 (f32 fma chains in K blocks, lanes16 and the gemv's
  // chain, f16 subnormals kept) whatever the host, on 2 and 3 threads.
  orders.emplace_back("torch2.15-cpu-math-avx512(threads=2,onednn=on)", ScalarType::f16);
  orders.emplace_back("torch2.15-cpu-math-avx2(threads=3,onednn=on)", ScalarType::f16);
  int cases = 0;
  size_t order_index = 0;
  for (const auto& [order, dtype] : orders) {
    ++order_index;
    for (size_t shape_index = 0; shape_index < shapes.size(); ++shape_index)
      for (bool causal : {false, true}) {
        // reduced: one of causal and not per (order, shape), alternating over both, so each order
        // runs each way on one of the two shapes.
        if (reduced && causal != ((order_index + shape_index) % 2 == 1)) continue;
        const Shape& s = shapes[shape_index];
        // 2 threads: one (batch, head) (MKL threaded outside PyTorch's loop) on even shapes, three
        // on odd ones (on an Intel host MKL's threaded rules inside the loop, its gemv on one thread).
        const int64_t kHeads = order.find("threads=2") != std::string::npos && shape_index % 2 == 0 ? 1 : 3;
        Request r;
        r.op = OpKind::attention;
        r.cols = s.d;
        r.seq_q = s.sq;
        r.seq_k = s.sk;
        r.causal = causal;
        r.lse_output = true;
        r.order = order;
        r.x_dtype = dtype;
        // The composites (torch2.15-cpu-math-*, ...) make no lse: they run without it.
        if (!gen::takes_shape(r)) r.lse_output = false;
        if (!gen::takes_shape(r)) continue;  // torch2.15-cpu-*: f16 attention with an Intel host's MKL is not modelled
        auto specials = [&, dtype = dtype](HostBuffers& h) {
          auto poke = [&](const char* name, int64_t at, float v) { set_value(h.get(name), dtype, at, v); };
          if (cases % 3 == 2) {  // specials in q, k and v
            poke("q", 3, NAN);
            poke("v", s.d + 1, INFINITY);
            poke("k", 0, 1e30f);
          }
          if (cases % 3 == 1) {  // subnormal and tiny values, which the vdpbf16ps model flushes
            for (int64_t e = 0; e < s.d; e += 3) poke("v", e, e % 2 ? 1e-39f : -2e-38f);
            poke("k", 1, 3e-39f);
            poke("q", 2, -1e-39f);
          }
        };
        check_on_interpreter_and(r, target, kHeads, 11, 0, 2.0, specials,
                                 fmt::format("attention order={} dtype={} Sq={} Sk={} D={} causal={}", order, name(dtype), s.sq, s.sk,
                                             s.d, causal));
        ++cases;
      }
  }
  return cases;
}

// The backward ops' requests: every named order that defines `op` (a torch2.15 order with
// threads=2 and 3, its slot count), every storage dtype, and for the ops with a weight the mixed
// 16-bit x with f32 weight and every combination of weight and bias, or for rms_norm_backward of
// weight and a given or recomputed rstd (`sparse`: one per width, in rotation). Requests whose
// kernels equal an earlier one's (an avx512 order that runs the avx2 kernel) are left out.
inline std::vector<Request> backward_requests(OpKind op, const std::vector<int64_t>& ns, bool sparse = false) {
  std::vector<Request> out;
  std::set<std::string> seen;
  auto add = [&](const Request& r) {
    std::string key = fmt::format("{}|{}|{}|{}|{}|{}|", r.cols, name(r.x_dtype), name(r.weight_type()), r.has_weight, r.has_bias, r.saved_stats);
    for (ir::Kernel k : gen::build_stages(r, gen::resolve(r))) {
      k.description.clear();
      key += ir::print(k);
    }
    if (seen.insert(key).second) out.push_back(r);
  };
  int rotation = 0;
  const bool weighted = op == OpKind::layer_norm_backward || op == OpKind::rms_norm_backward;
  const int affines = weighted ? 4 : 1;
  for (const gen::NamedOrder& n : gen::named_orders()) {
    bool has = false;
    for (OpKind o : n.ops) has |= o == op;
    if (!has || n.device_only || n.alias) continue;
    std::vector<std::string> names{std::string(n.name)};
    if (n.takes_environment) names = {std::string(n.name) + "(threads=2)", std::string(n.name) + "(threads=3)"};
    for (const std::string& order : names)
      for (ScalarType t : n.dtypes)
        for (int affine = 0; affine < affines; ++affine)
          for (int64_t cols : ns) {
            if (sparse && (rotation++ % affines) != affine) continue;
            Request r;
            r.op = op;
            r.cols = cols;
            r.order = order;
            r.x_dtype = t;
            r.has_weight = weighted && affine < 2;
            // rms_norm has no bias; its backward takes rstd or recomputes it instead.
            const bool rms = op == OpKind::rms_norm_backward;
            r.has_bias = weighted && !rms && affine % 2 == 0;
            r.saved_stats = !rms || affine % 2 == 0;
            add(r);
            if (weighted && t != ScalarType::f32 && affine < 2 && cols % 3 == 0) {  // the mixed path, on a share of the widths
              r.weight_dtype = ScalarType::f32;
              r.allow_mixed_dtypes = true;
              add(r);
            }
          }
  }
  return out;
}

// Every output of each backward request on `target` against the interpreter, bitwise, over row
// counts that split unevenly into slots and blocks. Returns the number of cases compared.
inline int backward_vs_interpreter(OpKind op, Target target, const std::vector<int64_t>& ns, const std::vector<int64_t>& rows_list,
                                   bool sparse = false) {
  int cases = 0;
  size_t i = 0;
  for (const Request& base : backward_requests(op, ns, sparse)) {
    const int64_t rows = rows_list[i++ % rows_list.size()];
    const auto outs = on_interpreter_and(base, target, rows, 11 + i, i % 3 == 0 ? 50.0 : 0.0, 2.0);
    KernelHandle k = compile(base);
    size_t o = 0;
    for (const ArgSpec& a : k->args()) {
      if (!a.output) continue;
      INFO(fmt::format("{} order={} x={} weight={} N={} rows={} target={} output {}", name(op), base.order, name(base.x_dtype),
                       name(base.weight_type()), base.cols, rows, name(target), a.name));
      CHECK(count_identical(a.dtype, outs[0][o], outs[1][o]) == a.elements(rows, base.cols));
      ++o;
    }
    ++cases;
  }
  return cases;
}

// cross_entropy and cross_entropy_backward (gen/ops/cross_entropy.cpp) under every named order
// that has them, in each of its dtypes: reductions mean, sum and none and ignore_index -100 and 0
// in rotation; widths `ns` on both sides of the vector and chunk boundaries and row counts
// `rows_list` on both sides of nll_loss's cascade levels (16 and 256 rows), the launches kept
// within `max_elements`. Planted: a target out of range (its row's loss and dx are NaN), NaN and
// +-inf logits, a dloss of -0 under none. Returns the requests compared.
inline int cross_entropy_vs_interpreter(Target target, const std::vector<int64_t>& ns, const std::vector<int64_t>& rows_list,
                                        int64_t max_elements) {
  int cases = 0;
  size_t i = 0;
  for (const gen::NamedOrder& n : gen::named_orders()) {
    if (n.device_only || n.alias) continue;
    for (OpKind op : {OpKind::cross_entropy, OpKind::cross_entropy_backward}) {
      if (std::find(n.ops.begin(), n.ops.end(), op) == n.ops.end()) continue;
      for (ScalarType t : n.dtypes)
        for (int64_t cols : ns) {
          const int64_t rows = rows_list[i % rows_list.size()];
          if (rows * cols > max_elements) continue;
          Request r;
          r.op = op;
          r.order = std::string(n.name);
          r.x_dtype = t;
          r.cols = cols;
          r.has_weight = r.has_bias = false;
          r.reduction = std::array{LossReduction::mean, LossReduction::sum, LossReduction::none}[i % 3];
          r.ignore_index = (i / 3) % 2 ? 0 : -100;
          ++i;
          const auto prepare = [&](HostBuffers& h) {
            auto* target_ = reinterpret_cast<int64_t*>(h.get("target").data());
            if (rows > 2) target_[1] = cols + 3;  // out of range: NaN, never a read outside the row
            if (op == OpKind::cross_entropy) {
              std::vector<uint8_t>& x = h.get("x");
              set_value(x, t, 0, NAN);
              if (rows > 4) set_value(x, t, 4 * cols + cols / 2, INFINITY);
              if (rows > 5) set_value(x, t, 5 * cols, -INFINITY);
            } else if (r.reduction == LossReduction::none && rows > 3) {
              set_value(h.get("dloss"), t, 2, -0.0f);
            }
          };
          check_on_interpreter_and(r, target, rows, 31 + i, 0.0, 3.0, prepare,
                                   fmt::format("{} order={} x={} N={} rows={} reduction={} ignore_index={}", name(op), r.order, name(t), cols,
                                               rows, name(r.reduction), r.ignore_index));
          ++cases;
        }
    }
  }
  return cases;
}

// gelu and gelu_backward (GELU's erf form, gen/ops/pointwise.cpp) in each of their forms: fast,
// oneDNN's minimax forward (onednn_isa=avx512_core) and its Abramowitz and Stegun one
// (onednn_isa=avx2), every dtype the running host's model takes (bf16's flushing store included),
// widths `ns` across the vector width, rows in rotation. Planted in x: +-0, +-inf, NaN, subnormals
// (whose gelu is subnormal: the flush), the minimax's interval edges and its right bound 5.5426.
// Returns the requests compared; the f32 ones run on every host.
inline int gelu_vs_interpreter(Target target, const std::vector<int64_t>& ns, const std::vector<int64_t>& rows_list) {
  int cases = 0;
  size_t i = 0;
  for (const char* order : {"fast", "torch2.15-cpu(onednn_isa=avx512_core)", "torch2.15-cpu(onednn_isa=avx2)"})
    for (OpKind op : {OpKind::gelu, OpKind::gelu_backward})
      for (ScalarType t : {ScalarType::f32, ScalarType::bf16, ScalarType::f16})
        for (int64_t cols : ns) {
          Request r;
          r.op = op;
          r.order = order;
          r.x_dtype = t;
          r.cols = cols;
          r.has_weight = r.has_bias = false;
          try {
            (void)gen::resolve(r);
          } catch (const Error&) {
            if (t == ScalarType::f32) throw;  // f32 is modelled on every host with AVX2
            continue;                         // 16-bit: only where oneDNN takes it (gen/order_table.cpp)
          }
          const int64_t rows = rows_list[i++ % rows_list.size()];
          const auto prepare = [&](HostBuffers& h) {
            std::vector<uint8_t>& x = h.get("x");
            const float planted[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -1e-40f, 3e-39f, 5.5425f, 5.5427f,
                                     -5.5426f, 0.1093f, -0.1094f, 2.0f, -3.0f, 88.0f, -88.0f, 3e38f};
            const int64_t count = std::min<int64_t>(rows * cols, std::size(planted));
            for (int64_t e = 0; e < count; ++e) set_value(x, t, (e * 7) % (rows * cols), planted[e]);
          };
          check_on_interpreter_and(r, target, rows, 41 + i, 0.0, 4.0, prepare,
                                   fmt::format("{} order={} x={} N={} rows={}", name(op), order, name(t), cols, rows));
          ++cases;
        }
  return cases;
}

}  // namespace ordo::backend_sweep

namespace ordo::backend_sweep {

// The Intel MKL model's threaded forms (one (batch, head) on 2 threads), each on the shape
// that takes it: q @ k^T of smalln's shape by the general kernel, with and without its last 1..3
// keys by the small-matrix kernel, and the composite's p @ v with K over 768 as the one-thread chain
// (C's rows, then its columns, cut between the threads) and cut in two. Forward and backward.
inline int intel_threaded_forms_vs_interpreter(Target target) {
  struct Case {
    OpKind op;
    bool composite;  // torch2.15-cpu-math (no lse), else the flash order
    int64_t sq, sk, d;
  };
  const std::vector<Case> cases = {
      {OpKind::attention, false, 5, 384, 128},          {OpKind::attention, false, 15, 33, 392},
      {OpKind::attention_backward, false, 5, 384, 128}, {OpKind::attention_backward, false, 15, 34, 400},
      {OpKind::attention, true, 380, 772, 8},           {OpKind::attention, true, 16, 772, 384},
      {OpKind::attention, true, 32, 1030, 32},          {OpKind::attention_backward, true, 16, 772, 384},
  };
  int compared = 0;
  for (const Case& c : cases) {
    Request r;
    r.op = c.op;
    r.order = c.composite ? "torch2.15-cpu-math-avx512(threads=2,mkl=intel)" : "torch2.15-cpu-avx512(threads=2,mkl=intel)";
    r.cols = c.d;
    r.seq_q = c.sq;
    r.seq_k = c.sk;
    r.has_weight = r.has_bias = false;
    if (c.op == OpKind::attention_backward) r.saved_stats = !c.composite;  // the composite reads no lse
    const auto outs = on_interpreter_and(r, target, 1, 13, 0, 1.0);
    for (size_t o = 0; o < outs[0].size(); ++o) {
      INFO(fmt::format("{} {} S_q={} S_k={} D={} target={} output {}", name(c.op), r.order, c.sq, c.sk, c.d, name(target), o));
      CHECK(outs[0][o] == outs[1][o]);
      ++compared;
    }
  }
  return compared;
}

// attention_backward's requests: the orders that define it (and parameterized variants: other
// lane counts, fma), every storage dtype, lse given and recomputed, causal or not, over shapes with
// partial lane blocks on both sides. `sparse`: each (order, dtype) on a rotating share of the rest.
inline int attention_backward_vs_interpreter(Target target, bool sparse) {
  struct Shape {
    int64_t sq, sk, d;
  };
  // torch2.15's bf16 dq, dk, dv: gemm_stub below m*n*k = 4096, oneDNN above ({9, 33, 64}; one
  // query row: {1, 300, 16}'s dq; over 384 keys: {2, 400, 8}'s dq) unless onednn=off.
  // {10, 12, 32}: the composite's (torch2.15-cpu-math) MKL kernels, which take S_k a multiple of 4.
  const std::vector<Shape> shapes = {{1, 1, 8}, {7, 17, 32}, {17, 7, 16}, {9, 33, 64}, {1, 300, 16}, {10, 12, 32}, {2, 400, 8}};
  std::vector<std::pair<std::string, ScalarType>> orders;
  for (const gen::NamedOrder& n : gen::named_orders())
    for (OpKind o : n.ops)
      if (o == OpKind::attention_backward && !n.device_only && !n.alias)
        for (ScalarType t : n.dtypes) orders.emplace_back(std::string(n.name), t);
  for (const char* p : {"flash(queries=3,fma=all)", "flash(bc=16,queries=5)", "fast(queries=1)"}) orders.emplace_back(p, ScalarType::f32);
  // PyTorch's threaded MKL calls (one (batch, head) on 2 threads): launched with one head, below.
  orders.emplace_back("torch2.15-cpu-avx512(threads=2,mkl=amd)", ScalarType::f32);
  // The Intel host's MKL threaded inside PyTorch's loop, with the gradients' row stride H*D:
  // launched with two heads (Request::heads), below.
  const std::string intel_loop = "torch2.15-cpu-avx512(threads=2,mkl=intel,mkl_threads=2)";
  orders.emplace_back(intel_loop, ScalarType::f32);
  // bf16's dq, dk, dv with oneDNN over 4096 multiply-adds and without it, whatever the host.
  orders.emplace_back("torch2.15-cpu-avx512(threads=2,mkl=amd,onednn=on)", ScalarType::bf16);
  orders.emplace_back("torch2.15-cpu-avx2(mkl=amd,onednn=off)", ScalarType::bf16);
  // oneDNN's emulated bf16 kernel (its one-row calls, two K blocks, 2-thread row cut) with the
  // Intel host's gemm_bf16bf16f32 (alpha, 3-key cut).
  orders.emplace_back("torch2.15-cpu-avx512(threads=2,mkl=intel,onednn=emulated)", ScalarType::bf16);
  // An Intel host with avx512_bf16: MKL's vdpbf16ps kernels (alpha per K block) and oneDNN's
  // avx512_bf16 kernel (pairs for strided weights, the flush of its conversion to bf16).
  orders.emplace_back("torch2.15-cpu-avx512(threads=2,mkl=intel-avx512bf16,onednn=on)", ScalarType::bf16);
  // f16's dq, dk, dv with oneDNN's avx512_fp16 brgemm over 4096 multiply-adds.
  orders.emplace_back("torch2.15-cpu-avx512(threads=2,mkl=intel-avx512bf16,onednn=on)", ScalarType::f16);
  // The composite's backward on any host (the MKL model named, not the host's), and threaded.
  orders.emplace_back("torch2.15-cpu-math-avx2(mkl=amd)", ScalarType::f32);
  orders.emplace_back("torch2.15-cpu-math-avx512(mkl=amd,threads=2)", ScalarType::f32);
  // The 16-bit composite's backward whatever the host (ATen's own products), each lane fold once.
  orders.emplace_back("torch2.15-cpu-math-default(onednn=off,threads=2)", ScalarType::bf16);
  orders.emplace_back("torch2.15-cpu-math-avx2(onednn=off)", ScalarType::f16);
  // The bf16 composite's backward by oneDNN's emulated kernel, on 2 threads (one-row calls chosen by
  // program_id and grid_extent; dk^T through scratch).
  orders.emplace_back("torch2.15-cpu-math-avx512(threads=2,onednn=emulated)", ScalarType::bf16);
  // ... and by oneDNN's kernels on avx512_bf16, one (batch, head) on 2 threads (k^T copied: one
  // query's q @ k^T by the fma chain) whatever the host.
  orders.emplace_back("torch2.15-cpu-math-avx512(threads=2,onednn=on)", ScalarType::bf16);
  // ... and in f16 by oneDNN's kernels on avx512_fp16, one (batch, head) on 2 and 3 threads.
  orders.emplace_back("torch2.15-cpu-math-avx512(threads=2,onednn=on)", ScalarType::f16);
  orders.emplace_back("torch2.15-cpu-math-avx2(threads=3,onednn=on)", ScalarType::f16);
  int cases = 0, rotation = 0;
  // r on the interpreter and on `target`, `rows` rows, every output bitwise.
  auto compare_one = [&](const Request& r, int64_t rows) {
    auto specials = [&](HostBuffers& h) {
      auto poke = [&](const char* name, int64_t at, float v) { set_value(h.get(name), r.x_dtype, at, v); };
      if (cases % 5 == 4) {  // a NaN in dout and an Inf in v: the specials reach every output
        poke("dout", 1, NAN);
        poke("v", (r.cols + 2) % (rows * r.seq_k * r.cols), INFINITY);  // a key row past the first where there is one
      }
      if (cases % 5 == 2)  // subnormal and tiny values in dout, which the vdpbf16ps models flush
        for (int64_t e = 0; e < std::min<int64_t>(rows * r.seq_q * r.cols, 3 * r.cols); e += 2) poke("dout", e, e % 4 ? 1e-39f : -2e-38f);
    };
    check_on_interpreter_and(r, target, rows, 13 + cases, 0, 1.5, specials,
                             fmt::format("attention_backward order={} dtype={} Sq={} Sk={} D={} heads={} kv_group={} causal={} lse={}",
                                         r.order, name(r.x_dtype), r.seq_q, r.seq_k, r.cols, r.heads, r.kv_group, r.causal,
                                         r.saved_stats ? "given" : "recomputed"));
    ++cases;
  };
  for (const auto& [order, dtype] : orders)
    for (const Shape& s : shapes) {
      const int pick = rotation++ % 4;  // sparse: one (causal, lse) variant per (order, shape), in rotation
      for (int variant = 0; variant < 4; ++variant) {
        if (sparse && pick != variant) continue;
        Request r;
        r.op = OpKind::attention_backward;
        r.cols = s.d;
        r.seq_q = s.sq;
        r.seq_k = s.sk;
        r.causal = variant % 2 == 1;
        r.saved_stats = variant < 2;
        r.order = order;
        r.x_dtype = dtype;
        r.has_weight = r.has_bias = false;
        if (!gen::takes_shape(r)) continue;
        const int64_t kHeads = order == intel_loop ? 2 : order.find("threads=") == std::string::npos ? 3 : 1;
        if (order == intel_loop) r.heads = kHeads;
        compare_one(r, kHeads);
      }
    }
  // Grouped-query attention (PyTorch's CPU flash backward): each row one (batch, K/V head) and its
  // group's query heads, dk and dv summed across them. (order, dtype, query heads per K/V head,
  // K/V heads launched: one makes PyTorch's threaded MKL calls.)
  const std::vector<std::tuple<std::string, ScalarType, int64_t, int64_t>> grouped = {
      {"torch2.15-cpu-avx2(mkl=amd)", ScalarType::f32, 2, 3},
      {"torch2.15-cpu-avx512(threads=2,mkl=amd)", ScalarType::f32, 3, 1},
      {"torch2.15-cpu-default(mkl=amd)", ScalarType::bf16, 4, 2},
      {"torch2.15-cpu-avx512(threads=2,mkl=amd,onednn=on)", ScalarType::bf16, 2, 1},
      {"torch2.15-cpu-avx2(mkl=amd,onednn=off)", ScalarType::f16, 3, 2},
  };
  for (const auto& [order, dtype, group, kv_heads] : grouped)
    for (const Shape& s : {shapes[1], shapes[3], shapes[4]}) {
      Request r;
      r.op = OpKind::attention_backward;
      r.cols = s.d;
      r.seq_q = s.sq;
      r.seq_k = s.sk;
      r.causal = (cases % 2) == 1;
      r.order = order;
      r.x_dtype = dtype;
      r.has_weight = r.has_bias = false;
      r.heads = group * kv_heads;
      r.kv_group = group;
      REQUIRE(gen::takes_shape(r));
      compare_one(r, kv_heads);
    }
  return cases;
}

// Attention with a mask (Request::mask: PyTorch's CPU flash kernels, the torch2.15-cpu orders,
// and the flash orders' tiled kernels), forward and backward, against the interpreter: every way
// the mask spans (batch, head, S_q, S_k) or broadcasts, in f32 and the inputs' dtype, launched as
// 2 batches of 3 heads (the torch2.15-cpu backward also grouped-query, 3 query heads per K/V
// head; the flash backward with lse recomputed in alternation). The flash cases take each of the
// forward's layouts: queries in lanes, keys in lanes (one query), exp2, and on cuda-emu a team.
// Besides its random values the mask has -inf scattered through it and over one query's every
// key (a fully masked row where the mask spans queries). Returns the number of cases compared.
inline int masked_attention_vs_interpreter(Target target, OpKind op) {
  struct Case {
    const char* order;
    ScalarType dtype;
    int64_t sq, sk, d, kv_group;
  };
  std::vector<Case> cases = {
      {"torch2.15-cpu-avx2(mkl=amd)", ScalarType::f32, 7, 17, 32, 1},
      {"torch2.15-cpu-avx512(mkl=intel)", ScalarType::f32, 17, 40, 64, 3},
      {"torch2.15-cpu-avx512(threads=2,mkl=amd)", ScalarType::bf16, 9, 33, 64, 1},
      {"torch2.15-cpu-default(mkl=amd,onednn=off)", ScalarType::f16, 5, 9, 16, 3},
      {"fast", ScalarType::f32, 19, 37, 32, 1},
      {"fast", ScalarType::f32, 1, 70, 64, 1},  // one query: keys in lanes
      {"flash(bc=8,exp2=on,scale=multiply,fma=all)", ScalarType::f32, 9, 20, 16, 1},
      {"flash", ScalarType::bf16, 12, 33, 32, 1},
      {"fast", ScalarType::f16, 7, 17, 16, 1},
  };
  if (target == Target::cuda_emu && op == OpKind::attention) cases.push_back({"flash-cuda", ScalarType::f32, 9, 20, 32, 1});
  const char* spans[] = {"B1QK", "BHQK", "1HQK", "11QK", "B11K", "11Q1"};
  constexpr int64_t kBatches = 2, kHeads = 3;
  int compared = 0;
  for (const Case& c : cases)
    for (size_t i = 0; i < std::size(spans); ++i) {
      Request r;
      r.op = op;
      r.cols = c.d;
      r.seq_q = c.sq;
      r.seq_k = c.sk;
      r.order = c.order;
      r.x_dtype = c.dtype;
      r.has_weight = r.has_bias = false;
      r.heads = kHeads;
      r.lse_output = op == OpKind::attention;
      if (op == OpKind::attention_backward) {
        r.kv_group = c.kv_group;
        r.saved_stats = compared % 2 == 0 || r.order.rfind("torch2.15", 0) == 0;  // the flash orders recompute lse in alternation
      }
      const ScalarType mask_dtype = i % 2 ? ScalarType::f32 : c.dtype;
      r.mask = AttentionMask::parse(fmt::format("{}:{}", name(mask_dtype), spans[i]));
      REQUIRE(r.mask);
      REQUIRE(gen::takes_shape(r));
      const int64_t rows = kBatches * kHeads / r.kv_group;
      auto minus_infinity = [&](HostBuffers& h) {
        std::vector<uint8_t>& m = h.get("mask");
        const int64_t elements = static_cast<int64_t>(m.size()) / size_bytes(mask_dtype);
        for (int64_t e = 0; e < elements; e += 3) set_value(m, mask_dtype, e, -INFINITY);
        const int64_t keys = r.mask->per_key ? c.sk : 1;
        if (r.mask->per_query && c.sq > 1)  // query 1 of the first (batch, head): every key masked
          for (int64_t e = keys; e < 2 * keys; ++e) set_value(m, mask_dtype, e, -INFINITY);
      };
      check_on_interpreter_and(r, target, rows, 29 + compared, 0, 2.0, minus_infinity,
                               fmt::format("{} order={} dtype={} Sq={} Sk={} D={} kv_group={} mask={}", name(op), r.order,
                                           name(r.x_dtype), r.seq_q, r.seq_k, r.cols, r.kv_group, r.mask->text()));
      ++compared;
    }
  return compared;
}

}  // namespace ordo::backend_sweep
