// Every backend against the interpreter, bit for bit: every op, every named order (plus
// parameterized variants), every storage dtype it is defined for, and N across lane and chunk
// boundaries. Inputs include a large offset, a wide range, subnormals, signed zeros, NaN and Inf.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backends/llvm/llvm_backend.hpp"
#include "gen/gen.hpp"
#include "ir/interpret.hpp"
#include "ir/float_bits.hpp"
#include "ordo/compare.hpp"
#include "ordo/ordo.hpp"

using namespace ordo;

namespace {

const std::vector<int64_t> kFullSweepN = {1, 2, 7, 8, 9, 15, 16, 17, 127, 128, 129, 255, 256, 4095, 4096, 4097, 65537};
// ORDO_BACKEND_SWEEP=reduced (the sanitizer build in scripts/hardening, whose interpreter runs
// ~10x slower): one N per regime (below a vector, exact vectors, a tail, several chunks, a
// long row with a tail) instead of every boundary.
const std::vector<int64_t> kReducedSweepN = {1, 7, 8, 17, 129, 4097};
const std::vector<int64_t>& sweep_n() {
  const char* v = std::getenv("ORDO_BACKEND_SWEEP");
  return v && std::string(v) == "reduced" ? kReducedSweepN : kFullSweepN;
}
const std::vector<Target> kBackends = {Target::cpu};
constexpr int64_t kRows = 7;  // not a multiple of 2 or 4: both the rows-in-flight groups and the remainder run

// Row r of x: 0 N(0,1); 1 offset 1e4, spread 1e-3; 2 spread 1e3 with zeros of both signs;
// 3 tiny values (squares underflow to subnormals); 4 NaN and Inf; 5 all equal; 6 N(-3, 0.5).
std::vector<uint8_t> sweep_x(ScalarType t, int64_t n) {
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

struct Variant {
  std::string order;
  ScalarType dtype;
  std::optional<ScalarType> weight_dtype;
  bool weight, bias;
  int rows_in_flight = 0;  // 0: the backend's choice
};

std::vector<Variant> variants(OpKind op) {
  std::vector<Variant> out;
  std::vector<std::string> names;
  for (const gen::NamedOrder& n : gen::named_orders())
    for (OpKind o : n.ops)
      if (o == op) {
        for (ScalarType t : n.dtypes) out.push_back({std::string(n.name), t, std::nullopt, true, true});
        names.emplace_back(n.name);
      }
  // Parameterized variants: fused updates, other lane counts, f64 accumulation.
  const bool softmax = op == OpKind::softmax || op == OpKind::log_softmax;
  const std::vector<std::string> params =
      softmax ? std::vector<std::string>{"online(lanes=4)", "online(lanes=1)", "fast(lanes=8)"}
      : op == OpKind::rms_norm
          ? std::vector<std::string>{"two-pass-lanes(accumulators=3,fma=all)", "two-pass-pairwise(lanes=4,block=64)",
                                     "two-pass-lanes(acc=f64)"}
          : std::vector<std::string>{"lane-welford(fma=all)", "lane-welford(lanes=16,chunk=4,acc=f64)",
                                     "sequential-welford(acc=f64)", "two-pass-lanes(accumulators=3,fma=all)",
                                     "two-pass-pairwise(lanes=4,block=64)"};
  for (const std::string& p : params) out.push_back({p, ScalarType::f32, std::nullopt, true, true});
  if (op == OpKind::layer_norm || op == OpKind::rms_norm) {
    out.push_back({"fast", ScalarType::bf16, ScalarType::f32, true, op == OpKind::layer_norm});  // mixed dtypes
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

// Runs one request on `target`; returns every output.
std::vector<std::vector<uint8_t>> run_on(Request r, Target target, const std::vector<uint8_t>& x,
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

void sweep(OpKind op) {
  int cases = 0;
  for (const Variant& v : variants(op)) {
    for (int64_t n : sweep_n()) {
      Request r;
      r.op = op;
      r.cols = n;
      r.order = v.order;
      r.x_dtype = v.dtype;
      r.weight_dtype = v.weight_dtype;
      r.allow_mixed_dtypes = v.weight_dtype.has_value();
      r.has_weight = (op == OpKind::layer_norm || op == OpKind::rms_norm) && v.weight;
      r.has_bias = op == OpKind::layer_norm && v.bias;
      r.rows_in_flight = v.rows_in_flight;
      const std::vector<uint8_t> x = sweep_x(v.dtype, n);
      const auto want = run_on(r, Target::interpreter, x);
      for (Target t : kBackends) {
        // Streaming (non-temporal) stores are a launch choice; alternate them across cases.
        const auto stores = cases % 2 ? CompiledKernel::Stores::streaming : CompiledKernel::Stores::cached;
        const auto got = run_on(r, t, x, stores);
        KernelHandle k = compile(r);
        size_t o = 0;
        for (const ArgSpec& a : k->args()) {
          if (!a.output) continue;
          const int64_t count = a.elements(kRows, n);
          const int64_t same = count_identical(a.dtype, got[o], want[o]);
          INFO(fmt::format("{} order={} dtype={} weight={} N={} backend={} rows_in_flight={} output={}", name(op), v.order,
                           name(v.dtype), name(r.weight_type()), n, name(t), k->rows_in_flight(), a.name));
          CHECK(same == count);
          ++o;
        }
        ++cases;
      }
    }
  }
  MESSAGE(fmt::format("{}: {} (order, dtype, N, backend) cases compared bitwise", name(op), cases));
}

}  // namespace

TEST_CASE("layer_norm: every backend matches the interpreter bit for bit") { sweep(OpKind::layer_norm); }
TEST_CASE("rms_norm: every backend matches the interpreter bit for bit") { sweep(OpKind::rms_norm); }
TEST_CASE("var_mean: every backend matches the interpreter bit for bit") { sweep(OpKind::var_mean); }
TEST_CASE("softmax: every backend matches the interpreter bit for bit") { sweep(OpKind::softmax); }
TEST_CASE("log_softmax: every backend matches the interpreter bit for bit") { sweep(OpKind::log_softmax); }

// Orders whose rounding depends on the launch's row count (grid_extent): enough rows that both
// sides of the boundary run, compared bitwise.
TEST_CASE("launch-dependent rounding (torch-decomp-cpu-avx2, bf16) matches the interpreter") {
  for (int64_t rows : {15, 16, 37}) {
    for (int64_t n : {7, 64, 1000}) {
      Request r;
      r.op = OpKind::layer_norm;
      r.cols = n;
      r.order = "torch-decomp-cpu-avx2";
      r.x_dtype = ScalarType::bf16;
      std::vector<std::vector<uint8_t>> outs[2];
      int i = 0;
      for (Target t : {Target::interpreter, Target::cpu}) {
        r.target = t;
        KernelHandle k = compile(r);
        HostBuffers h = make_buffers(*k, rows, 5, 0.5, 2.0);
        k->run(h.refs(rows, n), rows);
        for (size_t a = 0; a < h.args.size(); ++a)
          if (h.args[a].output) outs[i].push_back(h.bytes[a]);
        ++i;
      }
      for (size_t o = 0; o < outs[0].size(); ++o) {
        INFO(fmt::format("rows={} N={} output {}", rows, n, o));
        CHECK(count_identical(ScalarType::bf16, outs[0][o], outs[1][o]) ==
              static_cast<int64_t>(outs[0][o].size() / 2));
      }
    }
  }
}

// Hand-built kernels at the edges of the IR's integer and lane semantics (ir.hpp), where the
// LLVM lowering once differed from the interpreter or failed (found by tests/fuzz/fuzz_ir.cpp):
// a loop within `step` of INT64_MAX must end, not wrap; i64 arithmetic wraps; a broadcast to one
// lane and an extract from a one-lane value are the value itself. Each kernel writes a few i64
// results; the JIT's must equal the interpreter's, and both the stated values.
TEST_CASE("LLVM lowering: loops near INT64_MAX end, i64 wraps, one-lane broadcast and extract") {
  using namespace ordo::ir;
  const Type i64{ScalarType::i64, 1};
  Kernel k;
  k.name = std::string("edges");
  Builder b(k);
  const int out = b.buffer("out", ScalarType::i64, true, Extent::rows_by_cols);  // one row: the results
  auto count_trips = [&](int64_t begin, int64_t end, int64_t step) {
    int n = b.local("n", i64);
    b.assign(n, index_const(0));
    b.for_range("i", index_const(begin), index_const(end), step, [&](ExprRef) { b.assign(n, add(b.get(n), index_const(1))); });
    return b.get(n);
  };
  const std::vector<std::pair<ExprRef, int64_t>> results = {
      {count_trips(INT64_MAX - 3, INT64_MAX, 4), 1},
      {count_trips(INT64_MAX - 5, INT64_MAX, 2), 3},
      {count_trips(INT64_MIN, INT64_MIN + 10, 3), 4},
      {count_trips(7, -7, 1), 0},
      {mul(index_const(INT64_MAX), index_const(-4)), 4},
      {add(index_const(INT64_MAX), index_const(2)), INT64_MIN + 1},
      {extract(broadcast(index_const(42), 1), 0), 42},
      {select(extract(binary(Op::Lt, index_const(1), index_const(2)), 0), index_const(5), index_const(6)), 5},
  };
  const int64_t per_row = static_cast<int64_t>(results.size());
  for (int64_t i = 0; i < per_row; ++i) b.store(out, add(mul(program_id(0), index_const(per_row)), index_const(i)), results[size_t(i)].first);
  REQUIRE(verify(k).empty());
  constexpr int64_t rows = 3;
  const size_t n = results.size() * rows;
  std::vector<int64_t> interpreted(n, -1);
  interpret(k, {{interpreted.data(), int64_t(n)}}, {rows});
  for (int rif : {1, 2, 4}) {
    llvm_backend::Options options;
    options.rows_in_flight = rif;
    const llvm_backend::Compiled c = llvm_backend::compile(k, options);
    std::vector<int64_t> jit(n, -1);
    void* buffers[1] = {jit.data()};
    const int64_t extents[1] = {rows};
    c.entry(buffers, extents, 0, rows, 0);
    for (size_t i = 0; i < n; ++i) {
      INFO(fmt::format("rows in flight {}, result {} of row {}", rif, i % results.size(), i / results.size()));
      CHECK(jit[i] == interpreted[i]);
      CHECK(interpreted[i] == results[i % results.size()].second);
    }
  }
}
