// Every backend against the interpreter, bit for bit: every op, every named order (plus
// parameterized variants), every storage dtype it is defined for, and N across lane and chunk
// boundaries. Inputs include a large offset, a wide range, subnormals, signed zeros, NaN and Inf.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <bit>
#include <immintrin.h>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/llvm/llvm_backend.hpp"
#include "gen/gen.hpp"
#include "gen/blocks/math.hpp"
#include "ir/interpret.hpp"
#include "ir/float_bits.hpp"
#include "ordo/compare.hpp"
#include "ordo/ordo.hpp"
#include "src/kernel_parts.hpp"
#include "sweep.hpp"

using namespace ordo;

namespace {

using namespace ordo::backend_sweep;
const std::vector<Target> kBackends = {Target::cpu};

// Runs a one-instance kernel (grid rank 1, no launch rows after the extent) JIT-compiled.
void run_jit_once(const ir::Kernel& k, std::vector<void*> buffers) {
  const llvm_backend::Compiled c = llvm_backend::compile(k, {});
  const int64_t extents[1] = {1};
  c.entry(buffers.data(), extents, 0, 1, 0);
}

// Bit equality of two f32 values, NaNs as one value (the IR leaves NaN payloads open).
bool same_f32(float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

void sweep(OpKind op) {
  int cases = 0;
  std::set<std::string> seen;
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
      if (!gen::takes_shape(r)) continue;  // e.g. torch-cuda-tree's N % 4 == 0
      if (seen_kernel(r, Target::cpu, seen)) continue;  // an alias's kernel is compared once
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

// The orders that are deterministic on purpose (batch-invariant, fast): no output of `r` depends on
// the threads ordo runs with, and a row's dx is the same run alone as among 300 rows.
void check_batch_invariance(const Request& r) {
  KernelHandle k = compile(r);
  const int64_t rows = 300, n = r.cols, row = 123;
  HostBuffers h = make_buffers(*k, rows, 3, 1.0, 2.0);
  k->run(h.refs(rows, n), rows, 1);
  const HostBuffers one_thread = h;
  k->run(h.refs(rows, n), rows, 2);
  for (size_t a = 0; a < h.args.size(); ++a) {
    INFO(fmt::format("{} {} {} N={} output {}: 1 vs 2 threads", name(r.op), r.order, name(r.x_dtype), n, h.args[a].name));
    CHECK(h.bytes[a] == one_thread.bytes[a]);
  }
  // The launch of row 123 alone: each per-row input's slice of that row, the per-column inputs whole.
  HostBuffers alone = make_buffers(*k, 1, 3, 1.0, 2.0);
  for (size_t a = 0; a < h.args.size(); ++a) {
    const ArgSpec& arg = h.args[a];
    if (arg.output) continue;
    const int64_t per_row = arg.elements(1, n) * size_bytes(arg.dtype);
    if (arg.extent == ArgExtent::cols) alone.bytes[a] = h.bytes[a];
    else std::memcpy(alone.bytes[a].data(), h.bytes[a].data() + row * per_row, size_t(per_row));
  }
  k->run(alone.refs(1, n), 1);
  const int64_t bytes = n * size_bytes(r.x_dtype);
  INFO(fmt::format("{} {} {} N={}: dx of row {} alone vs batched", name(r.op), r.order, name(r.x_dtype), n, row));
  CHECK(std::memcmp(alone.get("dx").data(), h.get("dx").data() + row * bytes, size_t(bytes)) == 0);
}

}  // namespace

TEST_CASE("layer_norm: every backend matches the interpreter bit for bit") { sweep(OpKind::layer_norm); }
TEST_CASE("layer_norm_backward: every backend matches the interpreter bit for bit (both stages)") {
  // The reduced sweep (ASan builds): one width per regime, weight and bias in rotation.
  const int cases = reduced_sweep()
                        ? backward_vs_interpreter(OpKind::layer_norm_backward, Target::cpu, {1, 9, 17, 129}, {1, 7, 33}, true)
                        : backward_vs_interpreter(OpKind::layer_norm_backward, Target::cpu, {1, 7, 9, 16, 17, 129, 1000},
                                                  {1, 2, 7, 33, 70});
  MESSAGE(fmt::format("layer_norm_backward: {} requests compared bitwise", cases));
}

// N covers both column walks of SumKernel's dim-0 sum (whole groups of 32 columns, the
// interleaved rest), N < 8 (groups of 4) and N = 1 (the contiguous sum); 300 rows reach the
// cascade's second level.
TEST_CASE("rms_norm_backward: every backend matches the interpreter bit for bit (all stages)") {
  // The reduced sweep (ASan builds): one width per regime, in rotation.
  const int cases = reduced_sweep()
                        ? backward_vs_interpreter(OpKind::rms_norm_backward, Target::cpu, {1, 7, 9, 40, 129}, {1, 7, 33, 300}, true)
                        : backward_vs_interpreter(OpKind::rms_norm_backward, Target::cpu, {1, 3, 7, 8, 9, 17, 33, 40, 64, 129, 1000},
                                                  {1, 2, 7, 33, 300});
  MESSAGE(fmt::format("rms_norm_backward: {} requests compared bitwise", cases));
}

// torch2.15's one-column dweight on T threads: more than 32768 rows are cut into per-thread chunks.
TEST_CASE("rms_norm_backward: the one-column thread split (torch2.15, threads=T) matches the interpreter") {
  for (int threads : {2, 3, 9})
    for (int64_t rows : {32768, 40000}) {
      Request r;
      r.op = OpKind::rms_norm_backward;
      r.cols = 1;
      r.order = fmt::format("torch2.15-cpu-avx2(threads={})", threads);
      r.has_weight = true;
      r.has_bias = false;
      const auto outs = on_interpreter_and(r, Target::cpu, rows, 7, 0.5, 2.0);
      for (size_t o = 0; o < outs[0].size(); ++o) {
        INFO(fmt::format("threads={} rows={} output {}", threads, rows, o));
        CHECK(count_identical(ScalarType::f32, outs[0][o], outs[1][o]) == static_cast<int64_t>(outs[0][o].size() / 4));
      }
    }
}

TEST_CASE("layer_norm_backward: batch-invariant and fast give the same bits alone, batched, and on any thread count") {
  for (const char* order : {"batch-invariant", "fast"})
    for (ScalarType t : {ScalarType::f32, ScalarType::bf16})
      for (int64_t n : {7, 100, 4097}) {
        Request r;
        r.op = OpKind::layer_norm_backward;
        r.cols = n;
        r.order = order;
        r.x_dtype = t;
        check_batch_invariance(r);
      }
}

TEST_CASE("softmax_backward, log_softmax_backward: every backend matches the interpreter bit for bit") {
  // Row counts 1 and several: torch2.15-cpu-*(threads=2) fuses the sum's tail on a one-row launch only.
  for (OpKind op : {OpKind::softmax_backward, OpKind::log_softmax_backward}) {
    const int cases = reduced_sweep() ? backward_vs_interpreter(op, Target::cpu, {1, 9, 17, 129}, {1, 7}, true)
                                      : backward_vs_interpreter(op, Target::cpu, {1, 7, 8, 9, 15, 16, 17, 31, 33, 129, 1000}, {1, 2, 7, 33});
    MESSAGE(fmt::format("{}: {} requests compared bitwise", name(op), cases));
  }
}

TEST_CASE("softmax_backward, log_softmax_backward: batch-invariant and fast give the same bits alone, batched, and on any thread count") {
  for (OpKind op : {OpKind::softmax_backward, OpKind::log_softmax_backward})
    for (const char* order : {"batch-invariant", "fast"})
      for (ScalarType t : {ScalarType::f32, ScalarType::bf16})
        for (int64_t n : {7, 100, 4097}) {
          Request r;
          r.op = op;
          r.cols = n;
          r.order = order;
          r.x_dtype = t;
          check_batch_invariance(r);
        }
}

TEST_CASE("rms_norm_backward: batch-invariant and fast give the same bits alone, batched, and on any thread count") {
  for (const char* order : {"batch-invariant", "fast"})
    for (ScalarType t : {ScalarType::f32, ScalarType::bf16})
      for (int64_t n : {7, 100, 4097}) {
        Request r;
        r.op = OpKind::rms_norm_backward;
        r.cols = n;
        r.order = order;
        r.x_dtype = t;
        r.has_bias = false;
        r.saved_stats = n != 100;  // rstd recomputed on one width
        check_batch_invariance(r);
      }
}
TEST_CASE("rms_norm: every backend matches the interpreter bit for bit") { sweep(OpKind::rms_norm); }
TEST_CASE("var_mean: every backend matches the interpreter bit for bit") { sweep(OpKind::var_mean); }
TEST_CASE("sum: every backend matches the interpreter bit for bit") { sweep(OpKind::sum); }
TEST_CASE("mean: every backend matches the interpreter bit for bit") { sweep(OpKind::mean); }
TEST_CASE("silu: every backend matches the interpreter bit for bit") { sweep(OpKind::silu); }
TEST_CASE("silu_backward: every backend matches the interpreter bit for bit") {
  const int cases = backward_vs_interpreter(OpKind::silu_backward, Target::cpu, {1, 7, 9, 31, 33, 65, 129, 1000}, {1, 3, 7});
  MESSAGE(fmt::format("silu_backward: {} requests compared bitwise", cases));
}
TEST_CASE("gelu_tanh: every backend matches the interpreter bit for bit") { sweep(OpKind::gelu_tanh); }
TEST_CASE("gelu and gelu_backward (oneDNN's forms and fast): every backend matches the interpreter bit for bit") {
  const int cases = gelu_vs_interpreter(Target::cpu, {1, 7, 8, 9, 16, 17, 33, 129, 1000}, {1, 3, 7, 2});
  MESSAGE(fmt::format("gelu: {} requests compared bitwise", cases));
  CHECK(cases >= 2 * 2 * 9);  // fast and one oneDNN form, forward and backward, f32, every width
}
TEST_CASE("cross_entropy and its backward: every backend matches the interpreter bit for bit") {
  const int cases = cross_entropy_vs_interpreter(Target::cpu, {1, 7, 8, 9, 16, 17, 33, 129, 1000, 4097}, {1, 5, 16, 17, 257, 3}, 70000);
  MESSAGE(fmt::format("cross_entropy: {} requests compared bitwise", cases));
  CHECK(cases > 0);
}
TEST_CASE("gelu_tanh_backward: every backend matches the interpreter bit for bit") {
  const int cases = backward_vs_interpreter(OpKind::gelu_tanh_backward, Target::cpu, {1, 7, 9, 31, 33, 65, 129, 1000}, {1, 3, 7});
  MESSAGE(fmt::format("gelu_tanh_backward: {} requests compared bitwise", cases));
}
TEST_CASE("silu's and gelu_tanh's per-thread chunks and tails (torch2.15 orders, threads=T) match the interpreter") {
  MESSAGE(silu_chunks_vs_interpreter(Target::cpu) << " launches compared bitwise");
}
TEST_CASE("softmax: every backend matches the interpreter bit for bit") { sweep(OpKind::softmax); }
TEST_CASE("log_softmax: every backend matches the interpreter bit for bit") { sweep(OpKind::log_softmax); }

// Orders whose rounding depends on the launch's row count (grid_extent): enough rows that both
// sides of the boundary run, compared bitwise.
TEST_CASE("launch-dependent rounding (torch-decomp-cpu-avx2, bf16) matches the interpreter") {
  launch_dependent_vs_interpreter(Target::cpu, {15, 16, 37});
}

TEST_CASE("rms_norm's, sum's and mean's single-row thread split (torch2.15 orders, threads=T) matches the interpreter") {
  thread_split_vs_interpreter(Target::cpu);
}

TEST_CASE("the inductor2.15 orders' thread splits (threads=T) match the interpreter") {
  inductor_split_vs_interpreter(Target::cpu, false);
}

TEST_CASE("attention: every backend matches the interpreter bit for bit") {
  const int cases = attention_vs_interpreter(Target::cpu, reduced_sweep());
  MESSAGE(fmt::format("attention: {} (order, dtype, shape, causal) cases compared bitwise", cases));
}

TEST_CASE("attention with a mask: forward and backward match the interpreter bit for bit") {
  const int forward = masked_attention_vs_interpreter(Target::cpu, OpKind::attention);
  const int backward = masked_attention_vs_interpreter(Target::cpu, OpKind::attention_backward);
  MESSAGE(fmt::format("masked attention: {} forward and {} backward cases compared bitwise", forward, backward));
}

// Instances (batch, head, query block) are independent, so the thread count cannot change bits.
TEST_CASE("attention_backward: every backend matches the interpreter bit for bit (both stages)") {
  const int cases = attention_backward_vs_interpreter(Target::cpu, /*sparse=*/reduced_sweep());  // ASan builds: the rotating share
  MESSAGE(fmt::format("attention_backward: {} (order, dtype, shape, causal, lse) cases compared bitwise", cases));
}

// The tiled backward's outputs do not depend on how a launch is split: one (batch, head) alone
// gives the bits it gives among others, on any thread count.
TEST_CASE("attention_backward: flash and fast give the same bits alone, batched, and on any thread count") {
  for (const char* order : {"flash", "fast"})
    for (bool saved : {true, false}) {
      Request r;
      r.op = OpKind::attention_backward;
      r.cols = 32;
      r.seq_q = 37;
      r.seq_k = 45;
      r.causal = true;
      r.saved_stats = saved;
      r.order = order;
      r.has_weight = r.has_bias = false;
      KernelHandle k = compile(r);
      const int64_t heads = 5;
      HostBuffers h = make_buffers(*k, heads, 3, 0.0, 1.0);
      k->run(h.refs(heads, r.cols), heads, 1);
      const HostBuffers one_thread = h;
      k->run(h.refs(heads, r.cols), heads, 2);
      for (size_t a = 0; a < h.args.size(); ++a) {
        INFO(fmt::format("{} lse={} output {}: 1 vs 2 threads", order, saved, h.args[a].name));
        CHECK(h.bytes[a] == one_thread.bytes[a]);
      }
      HostBuffers alone = make_buffers(*k, 1, 3, 0.0, 1.0);
      const int64_t head = 3;
      for (size_t a = 0; a < h.args.size(); ++a) {
        if (h.args[a].output) continue;
        const size_t bytes = alone.bytes[a].size();
        std::memcpy(alone.bytes[a].data(), h.bytes[a].data() + head * bytes, bytes);
      }
      k->run(alone.refs(1, r.cols), 1);
      for (size_t a = 0; a < h.args.size(); ++a) {
        if (!h.args[a].output) continue;
        INFO(fmt::format("{} lse={} output {}: head {} alone vs batched", order, saved, h.args[a].name, head));
        const size_t bytes = alone.bytes[a].size();
        CHECK(std::memcmp(alone.bytes[a].data(), h.bytes[a].data() + head * bytes, bytes) == 0);
      }
    }
}

TEST_CASE("attention: results do not depend on the thread count") {
  for (const char* order : {"fast", "exact-tiled", "torch1.13-cpu-math"}) {
    Request r;
    r.op = OpKind::attention;
    r.cols = 64;
    r.seq_q = 70;
    r.seq_k = 90;
    r.causal = true;
    r.order = order;
    KernelHandle k = compile(r);
    std::vector<uint8_t> outs[3];
    for (int threads : {1, 2, 3}) {
      HostBuffers h = make_buffers(*k, 5, 3, 0, 1.5);
      k->run(h.refs(5, r.cols), 5, threads);
      outs[threads - 1] = h.get("out");
    }
    INFO(order);
    CHECK(outs[0] == outs[1]);
    CHECK(outs[0] == outs[2]);
  }
}

// Two schedules change at a size (gen/ops/attention.cpp): exact-tiled keeps its dot products in a
// panel up to 256 KiB of scratch (S_k vectors of the instance's queries), and fast widens 16-bit K
// and V into workspaces once per launch up to 2 MiB per batch*head. The sweeps' shapes are below
// both; these are on either side, each against the interpreter bitwise. (With 16 query lanes,
// S_k = 4096 fills the panel and 4097 passes it; at D = 64, S_k = 4096 fills the workspaces.)
// cuda-emu runs neither schedule (its kernel recomputes the scores and reads 16-bit K and V), so
// it also checks that each schedule keeps the order's bits.
TEST_CASE("attention: the schedules on either side of exact-tiled's panel and fast's widening limits match the interpreter") {
  struct Case {
    const char* order;
    ScalarType dtype;
    int64_t sq, sk, d;
    bool causal;
  };
  int compared = 0;
  for (const Case& c : {Case{"exact-tiled", ScalarType::f32, 17, 4096, 8, false}, Case{"exact-tiled", ScalarType::f32, 17, 4097, 8, true},
                        Case{"exact-tiled", ScalarType::bf16, 17, 4097, 8, false}, Case{"fast", ScalarType::bf16, 33, 4096, 64, true},
                        Case{"fast", ScalarType::bf16, 33, 4097, 64, false}, Case{"fast", ScalarType::f16, 33, 4097, 64, true}}) {
    Request r;
    r.op = OpKind::attention;
    r.order = c.order;
    r.x_dtype = c.dtype;
    r.seq_q = c.sq;
    r.seq_k = c.sk;
    r.cols = c.d;
    r.causal = c.causal;
    r.lse_output = true;
    INFO(fmt::format("{} {} Sq={} Sk={} D={} causal={}", c.order, name(c.dtype), c.sq, c.sk, c.d, c.causal));
    // The side of each limit (fast's does not depend on the host; exact-tiled's panel at 4096
    // keys fits with 8 or 16 query lanes).
    const KernelHandle k = compile(r);
    if (std::string(c.order) == "fast") CHECK(k->stage_count() == (c.sk * c.d * 8 <= (int64_t(2) << 20) ? 2u : 1u));
    if (c.sk == 4096 && std::string(c.order) == "exact-tiled") {
      bool panel = false;
      for (const ir::Buffer& b : kernel_ir(*k).buffers) panel = panel || b.name == "panel";
      CHECK(panel);
    }
    for (Target target : {Target::cpu, Target::cuda_emu}) {
      INFO(name(target));
      const auto outs = on_interpreter_and(r, target, 2, 5, 0, 1.5);
      REQUIRE(outs[0].size() == 2);
      CHECK(outs[0][0] == outs[1][0]);  // out
      CHECK(outs[0][1] == outs[1][1]);  // lse
    }
    ++compared;
  }
  MESSAGE(fmt::format("{} attention cases on either side of the schedules' limits compared bitwise, cpu and cuda-emu", compared));
}

// Causal flash visits only the key blocks an instance's queries can see (gen/ops/attention.cpp,
// key_blocks). An Inf in v at key 100 shows it: a visited block where the key is masked still
// adds 0 * Inf = NaN, so queries whose instance reaches that block come out NaN, and queries whose
// instance stops before it stay finite. Both orders: blocks of 64 keys, 16 queries per instance
// (fast: 32 on an AVX-512 CPU, which moves no boundary checked here).
TEST_CASE("causal flash skips the key blocks past an instance's last query") {
  for (const char* order : {"fast", "flash(bc=64,queries=16)"})
    for (Target target : {Target::interpreter, Target::cpu}) {
      Request r;
      r.op = OpKind::attention;
      r.cols = 32;
      r.seq_q = r.seq_k = 128;
      r.causal = true;
      r.order = order;
      r.target = target;
      KernelHandle k = compile(r);
      HostBuffers h = make_buffers(*k, 1, 5, 0, 1.0);
      for (int64_t d = 0; d < r.cols; ++d) set_value(h.get("v"), ScalarType::f32, 100 * r.cols + d, INFINITY);
      k->run(h.refs(1, r.cols), 1);
      std::vector<float> out(size_t(r.seq_q * r.cols));
      std::memcpy(out.data(), h.get("out").data(), out.size() * 4);
      auto finite = [&](int64_t from, int64_t to) {  // finite elements of query rows [from, to)
        int64_t n = 0;
        for (int64_t i = from * r.cols; i < to * r.cols; ++i) n += std::isfinite(out[size_t(i)]);
        return n;
      };
      INFO(order << " on " << name(target));
      CHECK(finite(0, 64) == 64 * r.cols);  // instances 0-3: keys 0-63 only
      CHECK(finite(96, 100) == 0);  // instance 6 (queries 96-111) visits keys 64-127, key 100 masked
      CHECK(finite(100, 128) == 0);  // queries that see key 100
    }
}

// flash's block max is `bm > s ? bm : s` (gen/ops/attention.cpp, block_of), which may drop a NaN score
// and take either zero, where IEEE maximum would not: the results must not show it. Causal, so
// that query 0 sees key 0 only: a NaN in q's row 0 makes its one visible score NaN, every other
// key of the block masked (-inf), and its out row and lse must be NaN while the other queries'
// stay finite. And queries of all +0 or all -0 (every score a zero of either sign, the max one
// too) give the same bits. Both flash orders, interpreter and CPU.
TEST_CASE("flash's select max: a NaN score makes its query NaN, and the sign of a zero max changes nothing") {
  for (const char* order : {"fast", "flash(bc=64,queries=16)"})
    for (Target target : {Target::interpreter, Target::cpu}) {
      Request r;
      r.op = OpKind::attention;
      r.cols = 32;
      r.seq_q = r.seq_k = 96;
      r.causal = true;
      r.lse_output = true;
      r.order = order;
      r.target = target;
      KernelHandle k = compile(r);
      INFO(order << " on " << name(target));
      auto run = [&](const std::function<void(HostBuffers&)>& set_q) {
        HostBuffers h = make_buffers(*k, 1, 7, 0, 1.0);
        set_q(h);
        k->run(h.refs(1, r.cols), 1);
        return h;
      };
      const HostBuffers nan_row = run([&](HostBuffers& h) { set_value(h.get("q"), ScalarType::f32, 3, NAN); });
      std::vector<float> out(size_t(r.seq_q * r.cols)), lse(size_t(r.seq_q));
      std::memcpy(out.data(), nan_row.get("out").data(), out.size() * 4);
      std::memcpy(lse.data(), nan_row.get("lse").data(), lse.size() * 4);
      int64_t nan_in_row0 = 0, finite_elsewhere = 0;
      for (int64_t i = 0; i < r.seq_q * r.cols; ++i) {
        if (i < r.cols) nan_in_row0 += std::isnan(out[size_t(i)]);
        else finite_elsewhere += std::isfinite(out[size_t(i)]);
      }
      CHECK(nan_in_row0 == r.cols);
      CHECK(std::isnan(lse[0]));
      CHECK(finite_elsewhere == (r.seq_q - 1) * r.cols);
      for (int64_t i = 1; i < r.seq_q; ++i) CHECK(std::isfinite(lse[size_t(i)]));
      auto zeros = [&](float zero) {
        return [&, zero](HostBuffers& h) {
          for (int64_t i = 0; i < r.seq_q * r.cols; ++i) set_value(h.get("q"), ScalarType::f32, i, zero);
        };
      };
      const HostBuffers plus = run(zeros(0.0f)), minus = run(zeros(-0.0f));
      CHECK(plus.get("out") == minus.get("out"));
      CHECK(plus.get("lse") == minus.get("lse"));
    }
}

// flash-cuda maps flash(Bc) onto a CUDA block (a team: a query per thread, or two and four
// threads per query at D = 256 and 512; one at D = 136 and 264, where two threads' shares would
// not be whole vectors of 8; K/V tiles in team memory). The mapping is not part of the order: in
// the interpreter, the specification, its bits must be flash(bc=Bc)'s, on shapes across the
// tile, team and key-block boundaries, causal, with the lse, in f32 and bf16.
TEST_CASE("flash-cuda has the bits of flash(Bc) with query lanes") {
  struct Shape {
    int64_t sq, sk, d;
  };
  int cases = 0;
  for (const Shape& s : {Shape{1, 1, 32}, Shape{65, 70, 64}, Shape{9, 33, 128}, Shape{40, 17, 256}, Shape{5, 9, 512},
                         Shape{7, 20, 136}, Shape{3, 11, 264}})
    for (ScalarType t : {ScalarType::f32, ScalarType::bf16})
      for (bool causal : {false, true}) {
        const int64_t bc = std::min<int64_t>(64, 4096 / s.d);
        std::vector<std::vector<uint8_t>> outs[2];
        int i = 0;
        for (std::string order : {std::string("flash-cuda"), fmt::format("flash(bc={})", bc)}) {
          Request r;
          r.op = OpKind::attention;
          r.cols = s.d;
          r.seq_q = s.sq;
          r.seq_k = s.sk;
          r.causal = causal;
          r.lse_output = true;
          r.x_dtype = t;
          r.order = order;
          r.target = Target::interpreter;
          outs[i++] = outputs_of(r, 2, 11, 0, 2.0);
        }
        INFO(fmt::format("Sq={} Sk={} D={} {} causal={}", s.sq, s.sk, s.d, name(t), causal));
        REQUIRE(outs[0].size() == 2);
        CHECK(outs[0][0] == outs[1][0]);  // out
        CHECK(outs[0][1] == outs[1][1]);  // lse
        ++cases;
      }
  MESSAGE(fmt::format("flash-cuda: {} cases equal to flash(Bc) in the interpreter", cases));
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

// The IR's f32 -> i32 conversion (x86's cvtps2dq: round to nearest even, NaN and out of range to
// INT32_MIN), which the lowering emits as one instruction where the host has it for the width (16,
// 8, 4 lanes), one per 16 lanes of 32, and as roundeven and a range check elsewhere (1 lane):
// every width against the interpreter and the stated values, at ties, the range's ends,
// infinities and NaN.
TEST_CASE("LLVM lowering: f32 to i32 conversion in every vector width, at its edges") {
  using namespace ordo::ir;
  const std::vector<std::pair<float, int32_t>> cases = {
      {0.5f, 0}, {1.5f, 2}, {2.5f, 2}, {-0.5f, 0}, {-1.5f, -2}, {-2.5f, -2}, {0x1.fffffep30f, 2147483520},
      {2147483648.0f, INT32_MIN}, {-2147483648.0f, INT32_MIN}, {-0x1.000002p31f, INT32_MIN}, {INFINITY, INT32_MIN},
      {-INFINITY, INT32_MIN}, {NAN, INT32_MIN}, {1e-40f, 0}, {-7.49f, -7}, {123456.5f, 123456}};
  // The values twice over, the second time rotated by 5, so that the 32-lane width (two
  // conversions of 16) sees each of them in either half, and halves put back in the wrong place
  // give other values.
  const int64_t n = 2 * static_cast<int64_t>(cases.size());
  auto case_of = [&](int64_t i) { return cases[size_t(i < n / 2 ? i : (i + 5) % (n / 2))]; };
  const std::vector<int> widths = {32, 16, 8, 4, 1};
  const int64_t slots = static_cast<int64_t>(widths.size());
  Kernel k;
  k.name = std::string("to_i32");
  Builder b(k);
  const int x = b.buffer("x", ScalarType::f32, false, Extent::rows_by_cols);
  const int out = b.buffer("out", ScalarType::f32, true, Extent::rows_by_cols);
  // out holds a copy of the results per width.
  for (size_t w = 0; w < widths.size(); ++w)
    for (int64_t at = 0; at < n; at += widths[w]) {
      const ExprRef in = load(k, x, index_const(at), widths[w]);
      b.store(out, index_const(int64_t(w) * n + at), bitcast(cast(in, ScalarType::i32), ScalarType::f32));
    }
  REQUIRE(verify(k).empty());
  std::vector<float> in(static_cast<size_t>(n)), interpreted(size_t(slots * n)), jit(size_t(slots * n));
  for (int64_t i = 0; i < n; ++i) in[size_t(i)] = case_of(i).first;
  interpret(k, {{in.data(), n}, {interpreted.data(), slots * n}}, {1});
  run_jit_once(k, {in.data(), jit.data()});
  for (int64_t i = 0; i < slots * n; ++i) {
    int32_t want = case_of(i % n).second, from_interpreter = 0, from_jit = 0;
    std::memcpy(&from_interpreter, &interpreted[size_t(i)], 4);
    std::memcpy(&from_jit, &jit[size_t(i)], 4);
    INFO(fmt::format("{} lanes, value {}", widths[size_t(i / n)], in[size_t(i % n)]));
    CHECK(from_interpreter == want);
    CHECK(from_jit == want);
  }
}

// The IR's f32 -> bf16 conversion (ir/float_bits.hpp: round to nearest even, a NaN kept with its
// payload and made quiet), stored as bf16 and, the form the bf16 orders round by, widened back to
// f32 in the same expression, which the lowering folds to one mask of the rounded word. Every
// vector width against the interpreter and f32_to_bf16_bits, bit for bit, NaN payloads included:
// ties either way, the carry into the exponent and out of the largest finite value, NaNs whose
// rounding increment would carry (0x7fc0ffff) or wrap the word (0xffffffff), signalling NaNs,
// subnormals, and a few thousand patterns from a fixed seed.
TEST_CASE("LLVM lowering: f32 to bf16 in every vector width, at ties, NaN payloads and subnormals") {
  using namespace ordo::ir;
  std::vector<uint32_t> bits = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu, 0xbf818000u, 0x3fffffffu, 0x7f7fffffu, 0x7f7f8000u,
                                0x7f7e8000u, 0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7fc0ffffu, 0xffffffffu, 0xffc08000u,
                                0x7f800001u, 0xff800001u, 0x7fbfffffu, 0x7f80ffffu, 0x00000001u, 0x00008000u, 0x00018000u, 0x807fffffu,
                                0x007fffffu, 0x00000000u, 0x80000000u, 0x0000ffffu};
  uint64_t state = 0x9e3779b97f4a7c15u;
  while (bits.size() < 4096) {  // splitmix64's output, a 32-bit half
    state += 0x9e3779b97f4a7c15u;
    uint64_t z = (state ^ (state >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    bits.push_back(static_cast<uint32_t>(z ^ (z >> 31)));
  }
  const int64_t n = static_cast<int64_t>(bits.size());  // a multiple of 16
  Kernel k;
  k.name = std::string("to_bf16");
  Builder b(k);
  const int x = b.buffer("x", ScalarType::f32, false, Extent::rows_by_cols);
  const int stored = b.buffer("stored", ScalarType::bf16, true, Extent::rows_by_cols);
  const int widened = b.buffer("widened", ScalarType::f32, true, Extent::rows_by_cols);
  // Each width converts every value; its results go to the width's quarter of both outputs.
  const std::vector<int> widths = {16, 8, 4, 1};
  for (size_t w = 0; w < widths.size(); ++w)
    b.for_range("at", index_const(0), index_const(n), widths[w], [&](ExprRef at) {
      const ExprRef in = b.let("in", load(k, x, at, widths[w]));
      const ExprRef slot = add(index_const(int64_t(w) * n), at);
      b.store(stored, slot, cast(in, ScalarType::bf16));
      b.store(widened, slot, cast(cast(in, ScalarType::bf16), ScalarType::f32));
    });
  REQUIRE(verify(k).empty());
  std::vector<float> in(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) in[size_t(i)] = std::bit_cast<float>(bits[size_t(i)]);
  const size_t total = widths.size() * size_t(n);
  std::vector<uint16_t> stored_interpreted(total), stored_jit(total);
  std::vector<float> widened_interpreted(total), widened_jit(total);
  interpret(k, {{in.data(), n}, {stored_interpreted.data(), int64_t(total)}, {widened_interpreted.data(), int64_t(total)}}, {1});
  run_jit_once(k, {in.data(), stored_jit.data(), widened_jit.data()});
  int differing = 0;
  for (size_t i = 0; i < total; ++i) {
    const uint32_t from = bits[i % size_t(n)];
    const uint16_t want = f32_to_bf16_bits(std::bit_cast<float>(from));
    const bool same = stored_interpreted[i] == want && stored_jit[i] == want &&
                      std::bit_cast<uint32_t>(widened_interpreted[i]) == uint32_t(want) << 16 &&
                      std::bit_cast<uint32_t>(widened_jit[i]) == uint32_t(want) << 16;
    if (!same && ++differing <= 8)
      FAIL_CHECK(fmt::format("{} lanes, 0x{:08x}: want 0x{:04x}; stored: interpreter 0x{:04x}, jit 0x{:04x}; widened: interpreter 0x{:08x}, jit 0x{:08x}",
                             widths[i / size_t(n)], from, want, stored_interpreted[i], stored_jit[i],
                             std::bit_cast<uint32_t>(widened_interpreted[i]), std::bit_cast<uint32_t>(widened_jit[i])));
  }
  CHECK(differing == 0);
}

// Streamed (non-temporal) stores: a vector store to a rows_by_cols output, with the launch's
// stream flag, takes x86's vector form at an address aligned to the vector's size and 8-byte
// pieces elsewhere (lower.cpp). Every vector width of f32 and bf16 at every element offset from a
// 64-byte line stores exactly the values, and nothing past them, as the cached form does.
TEST_CASE("LLVM lowering: streamed stores at every alignment store the cached stores' bytes") {
  using namespace ordo::ir;
  for (ScalarType type : {ScalarType::f32, ScalarType::bf16})
    for (int lanes : {32, 16, 8, 4}) {
      constexpr int64_t n = 256;
      Kernel k;
      k.name = std::string("copy");
      Builder b(k);
      const int x = b.buffer("x", type, false, Extent::rows_by_cols);
      const int out = b.buffer("out", type, true, Extent::rows_by_cols);
      b.for_range("at", index_const(0), index_const(n), lanes, [&](ExprRef at) { b.store(out, at, load(k, x, at, lanes)); });
      REQUIRE(verify(k).empty());
      const llvm_backend::Compiled c = llvm_backend::compile(k, {});
      const int64_t bytes = size_bytes(type);
      std::vector<uint8_t> in(size_t(n * bytes));
      for (size_t i = 0; i < in.size(); ++i) in[i] = uint8_t(i * 37 + 11);
      for (int64_t offset = 0; offset < 64 / bytes; ++offset)
        for (int64_t flags : {int64_t(0), llvm_backend::kStreamOutputs}) {
          alignas(64) uint8_t line[n * 4 + 128];
          std::memset(line, 0xee, sizeof line);
          void* buffers[2] = {in.data(), line + offset * bytes};
          const int64_t extents[1] = {1};
          c.entry(buffers, extents, 0, 1, flags);
          INFO(fmt::format("{} lanes of {}, {} elements past a 64-byte line, {}", lanes, name(type), offset, flags ? "streamed" : "cached"));
          CHECK(std::memcmp(line + offset * bytes, in.data(), in.size()) == 0);
          bool untouched = true;
          for (int64_t i = 0; i < int64_t(sizeof line); ++i)
            if ((i < offset * bytes || i >= offset * bytes + n * bytes) && line[i] != 0xee) untouched = false;
          CHECK(untouched);
        }
    }
}

// The IR's ldexp (ir.hpp) inside its domain: x NaN, or |x| in [0.5, 2) with n in [-250, 254]. Its
// edges: the domain's bounds, results that are subnormal, ties rounded to even (0.5 and 1.5 times
// 2^-149), the largest finite results. Every width the lowering treats apart (16 and 32 lanes
// by vscalefps on an AVX-512 host, 8 and 4 with AVX512VL, 1 by the two products), against the
// value x * 2^n in double rounded once to f32.
TEST_CASE("LLVM lowering: ldexp in every vector width, at the edges of its domain") {
  using namespace ordo::ir;
  std::vector<float> xs = {0.5f, -0.5f, 0.75f, 1.0f, -1.0f, 1.5f, 0x1.000002p0f, 0x1.fffffep0f, -0x1.fffffep0f, 0x1.8p-1f, 0.70710677f, 1.4142135f};
  for (int i = 0; i < 20; ++i) xs.push_back(std::ldexp(1.0f + static_cast<float>((i * 7919) % 8388608) / 8388608.0f, -(i % 2)) * (i % 3 ? 1.0f : -1.0f));
  const std::vector<int32_t> ns = {-250, -249, -200, -151, -150, -149, -148, -127, -126, -125, -1, 0, 1, 100, 126, 127, 128, 200, 253, 254};
  std::vector<float> x_in;
  std::vector<int32_t> n_in;
  for (float x : xs)
    for (int32_t k : ns) {
      x_in.push_back(x);
      n_in.push_back(k);
    }
  x_in.push_back(std::nanf(""));
  n_in.push_back(-3);
  while (x_in.size() % 32 != 0) {  // whole vectors in every width
    x_in.push_back(1.25f);
    n_in.push_back(-140);
  }
  const int64_t n = static_cast<int64_t>(x_in.size());
  Kernel k;
  k.name = "ldexp";
  Builder b(k);
  const int x = b.buffer("x", ScalarType::f32, false, Extent::rows_by_cols);
  const int e = b.buffer("n", ScalarType::i32, false, Extent::rows_by_cols);
  const int out = b.buffer("out", ScalarType::f32, true, Extent::rows_by_cols);
  const std::vector<int> widths = {32, 16, 8, 4, 1};
  for (size_t w = 0; w < widths.size(); ++w)
    for (int64_t at = 0; at < n; at += widths[w])
      b.store(out, index_const(int64_t(w) * n + at),
              binary(Op::Ldexp, load(k, x, index_const(at), widths[w]), load(k, e, index_const(at), widths[w])));
  REQUIRE(verify(k).empty());
  const size_t all = widths.size() * size_t(n);
  x_in.resize(all, 1.0f);  // rows_by_cols with N = all: one row
  n_in.resize(all, 0);
  std::vector<float> interpreted(all), jit(all);
  interpret(k, {{x_in.data(), int64_t(all)}, {n_in.data(), int64_t(all)}, {interpreted.data(), int64_t(all)}}, {1});
  run_jit_once(k, {x_in.data(), n_in.data(), jit.data()});
  for (size_t i = 0; i < all; ++i) {
    const size_t j = i % size_t(n);
    const float want = std::isnan(x_in[j]) ? x_in[j] : static_cast<float>(std::ldexp(static_cast<double>(x_in[j]), n_in[j]));
    INFO(fmt::format("{} lanes: ldexp({:a}, {}) = {:a}", widths[i / size_t(n)], x_in[j], n_in[j], want));
    CHECK(same_f32(interpreted[i], want));
    CHECK(same_f32(jit[i], want));
  }
}

// vdpbf16ps itself on 16 lanes (x86 with avx512_bf16 only: the caller checks the CPU).
__attribute__((target("avx512f,avx512bf16"))) void vdpbf16ps_16(const float* acc, const uint16_t* x, const uint16_t* y, float* out) {
  __m512bh xv, yv;
  std::memcpy(&xv, x, 64);
  std::memcpy(&yv, y, 64);
  _mm512_storeu_ps(out, _mm512_dpbf16_ps(_mm512_loadu_ps(acc), xv, yv));
}

// The IR's bf16_pair_dot (ir.hpp), the interpreter's definition against the instruction it
// names (on a CPU with avx512_bf16), and every backend against the interpreter: the CPU JIT in
// each width its lowering treats apart (32 and 16 lanes, 8 and 4, 3 padded to 4, 1; with
// avx512_bf16 one vdpbf16ps each, elsewhere the meaning written out) and cuda-emu. Operands
// are drawn to reach its edges: subnormal and zero factors and accumulators, sums that cancel
// to near 2^-126 (where the flush decides after rounding), Inf and NaN, and factors with low
// bits set (ignored: a factor is its high half).
TEST_CASE("bf16_pair_dot: the interpreter is vdpbf16ps, and every backend is the interpreter") {
  using namespace ordo::ir;
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&] {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return state;
  };
  auto factor = [&]() -> uint32_t {
    const uint32_t sign = uint32_t(next() & 1) << 31, kind = uint32_t(next() % 16);
    uint32_t bits;
    if (kind == 0) bits = uint32_t(next() % 0x80) << 16;                                  // subnormal or zero
    else if (kind == 1) bits = next() & 1 ? 0x7f800000u : 0x7fc00000u;                    // Inf, NaN
    else if (kind < 6) bits = (uint32_t(0x7b + next() % 8) << 23) | (uint32_t(next() % 0x80) << 16);  // near 1
    else if (kind < 9) bits = (uint32_t(1 + next() % 8) << 23) | (uint32_t(next() % 0x80) << 16);     // tiny normal
    else bits = uint32_t(next() & 0x7fff0000u);
    if (kind == 15) bits |= uint32_t(next() & 0xffff);  // low bits the node ignores
    return sign | bits;
  };
  auto accumulator = [&]() -> uint32_t {
    const uint32_t sign = uint32_t(next() & 1) << 31, kind = uint32_t(next() % 8);
    if (kind == 0) return sign | uint32_t(next() % 0x800000);  // subnormal or zero
    if (kind == 1) return sign | 0x00800000u;                  // 2^-126
    if (kind < 4) return sign | (uint32_t(1 + next() % 6) << 23) | uint32_t(next() & 0x7fffff);
    return uint32_t(next());
  };
  constexpr int64_t n = 32 * 512;
  std::vector<std::vector<float>> in(5, std::vector<float>(size_t(n)));
  for (int64_t i = 0; i < n; ++i) {
    in[0][size_t(i)] = std::bit_cast<float>(accumulator());
    for (size_t a = 1; a < 5; ++a) in[a][size_t(i)] = std::bit_cast<float>(factor());
    if (i % 4 == 0) {  // an odd product that cancels acc to within a few ulps of 2^-126
      const float p = in[1][size_t(i)] * in[2][size_t(i)];
      if (std::isfinite(p) && p != 0) in[0][size_t(i)] = -p + std::copysign(0x1p-126f, p) * float(1 + next() % 3);
    }
  }
  Kernel k;
  k.name = "bf16_pair_dot";
  Builder b(k);
  std::vector<int> args;
  for (const char* name : {"acc", "x_odd", "y_odd", "x_even", "y_even"}) args.push_back(b.buffer(name, ScalarType::f32, false, Extent::rows_by_cols));
  const int out = b.buffer("out", ScalarType::f32, true, Extent::rows_by_cols);
  const std::vector<int> widths = {32, 16, 8, 4, 3, 1};
  for (size_t w = 0; w < widths.size(); ++w)
    b.for_range("at", index_const(0), index_const(n - n % widths[w]), widths[w], [&](ExprRef at) {
      std::vector<ExprRef> v;
      for (int a : args) v.push_back(load(k, a, at, widths[w]));
      b.store(out, add(index_const(int64_t(w) * n), at), bf16_pair_dot(v[0], v[1], v[2], v[3], v[4]));
    });
  REQUIRE(verify(k).empty());
  const size_t all = widths.size() * size_t(n);
  for (auto& a : in) a.resize(all, 0.0f);  // rows_by_cols with N = all: one row
  std::vector<float> interpreted(all, 0.0f), jit(all, 0.0f), emu(all, 0.0f);
  interpret(k, {{in[0].data(), int64_t(all)}, {in[1].data(), int64_t(all)}, {in[2].data(), int64_t(all)}, {in[3].data(), int64_t(all)},
                {in[4].data(), int64_t(all)}, {interpreted.data(), int64_t(all)}}, {1});
  run_jit_once(k, {in[0].data(), in[1].data(), in[2].data(), in[3].data(), in[4].data(), jit.data()});
  const cuda_backend::EmuKernel e = cuda_backend::compile_emu(cuda_backend::render(k));
  void* const emu_buffers[6] = {in[0].data(), in[1].data(), in[2].data(), in[3].data(), in[4].data(), emu.data()};
  const long long emu_extents[1] = {1};
  e.run_blocks(emu_buffers, emu_extents, 1, 0, 1);

  int64_t flushed = 0, at_edge = 0;
  for (size_t i = 0; i < all; ++i) {
    const int64_t w = widths[i / size_t(n)], j = int64_t(i % size_t(n));
    if (j + w > n - n % w) continue;  // lanes past a width's last whole vector were not computed
    INFO(fmt::format("{} lanes, lane {}: acc {:a}, odd {:a} * {:a}, even {:a} * {:a}", w, j, in[0][size_t(j)], in[1][size_t(j)], in[2][size_t(j)],
                     in[3][size_t(j)], in[4][size_t(j)]));
    CHECK(same_f32(jit[i], interpreted[i]));
    CHECK(same_f32(emu[i], interpreted[i]));
    flushed += interpreted[i] == 0.0f;
    at_edge += std::fabs(interpreted[i]) == 0x1p-126f;
  }
  CHECK(flushed > n / 20);  // the draw reaches the flush and the edge
  CHECK(at_edge > 10);
  if (!__builtin_cpu_supports("avx512bf16")) {
    MESSAGE("this CPU has no avx512_bf16: the interpreter's bf16_pair_dot was compared with the backends only, not with vdpbf16ps");
    return;
  }
  int64_t compared = 0;
  for (int64_t at = 0; at < n; at += 16) {
    uint16_t x[32], y[32];
    for (int l = 0; l < 16; ++l) {  // lane l: the odd factor in the high half of its word, the even one low
      x[2 * l] = uint16_t(std::bit_cast<uint32_t>(in[3][size_t(at + l)]) >> 16), x[2 * l + 1] = uint16_t(std::bit_cast<uint32_t>(in[1][size_t(at + l)]) >> 16);
      y[2 * l] = uint16_t(std::bit_cast<uint32_t>(in[4][size_t(at + l)]) >> 16), y[2 * l + 1] = uint16_t(std::bit_cast<uint32_t>(in[2][size_t(at + l)]) >> 16);
    }
    float hw[16];
    vdpbf16ps_16(&in[0][size_t(at)], x, y, hw);
    for (int l = 0; l < 16; ++l) {
      const size_t j = size_t(at + l);
      INFO(fmt::format("lane {}: acc {:a}, odd {:a} * {:a}, even {:a} * {:a}", j, in[0][j], in[1][j], in[2][j], in[3][j], in[4][j]));
      CHECK(same_f32(interpreted[size_t(1) * size_t(n) + j], hw[l]));  // the 16-lane row
      ++compared;
    }
  }
  MESSAGE(fmt::format("bf16_pair_dot: {} lanes equal to vdpbf16ps; every width on cpu and cuda-emu equal to the interpreter", compared));
}

// Sleef's expf_u10 as gen/blocks/math.cpp writes it, with its final u * 2^(q>>1) * 2^(q - (q>>1)) as
// the IR's ldexp, against Sleef's own two products written here in scalar C++: every input
// whose result is subnormal or near it (|d| in [64, 128)), a stride through the rest of
// [-128, 128], and the specials.
TEST_CASE("Sleef expf_u10: the ldexp form gives Sleef's two-product bits") {
  using namespace ordo::ir;
  auto sleef_two_products = [](float d) {
    auto bits = [](uint32_t u) { return std::bit_cast<float>(u); };
    const float prod = d * bits(0x3fb8aa3b);
    const int32_t q = std::isnan(prod) || std::fabs(prod) >= 2147483648.0f ? INT32_MIN : static_cast<int32_t>(std::nearbyint(prod));
    const float qf = static_cast<float>(q);
    float s = std::fma(qf, -bits(0x3f317200), d);
    s = std::fma(qf, -bits(0x35bfbe8e), s);
    float u = bits(0x39502bda);
    for (uint32_t c : {0x3ab696c9u, 0x3c0888a6u, 0x3d2aaa7au, 0x3e2aaaabu, 0x3f000000u}) u = std::fma(u, s, bits(c));
    u = 1.0f + std::fma(s * s, u, s);
    const int32_t qh = q >> 1;
    const float p1 = std::bit_cast<float>(static_cast<uint32_t>(qh + 127) << 23);
    const float p2 = std::bit_cast<float>(static_cast<uint32_t>(q - qh + 127) << 23);
    u = (u * p1) * p2;
    if (d < -104.0f) u = 0.0f;
    return 100.0f < d ? INFINITY : u;
  };
  std::vector<float> d;
  for (uint32_t b = std::bit_cast<uint32_t>(64.0f); b < std::bit_cast<uint32_t>(128.0f); ++b) {
    d.push_back(std::bit_cast<float>(b));
    d.push_back(-std::bit_cast<float>(b));
  }
  for (uint32_t b = 0; b < std::bit_cast<uint32_t>(64.0f); b += 997) {
    d.push_back(std::bit_cast<float>(b));
    d.push_back(-std::bit_cast<float>(b));
  }
  for (float v : {0.0f, -0.0f, INFINITY, -INFINITY, std::nanf(""), 1e30f, -1e30f, 100.0f, -104.0f, 88.72283f, 88.72284f, -87.33655f})
    d.push_back(v);
  while (d.size() % 16 != 0) d.push_back(1.0f);
  const int64_t n = static_cast<int64_t>(d.size());
  Kernel k;
  k.name = "sleef_exp";
  Builder b(k);
  const int in = b.buffer("d", ScalarType::f32, false, Extent::rows_by_cols);
  const int out = b.buffer("exp", ScalarType::f32, true, Extent::rows_by_cols);
  b.for_range("i", index_const(0), index_const(n), 16, [&](ExprRef i) { b.store(out, i, gen::sleef_expf_u10(b, load(k, in, i, 16))); });
  REQUIRE(verify(k).empty());
  std::vector<float> jit(d.size());
  run_jit_once(k, {d.data(), jit.data()});
  int64_t differ = 0;
  for (size_t i = 0; i < d.size(); ++i)
    if (!same_f32(jit[i], sleef_two_products(d[i])) && differ++ < 5) MESSAGE(fmt::format("exp({:a}): {:a}, Sleef {:a}", d[i], jit[i], sleef_two_products(d[i])));
  CHECK(differ == 0);
  MESSAGE(fmt::format("Sleef expf_u10: {} inputs, the ldexp form against the two products", d.size()));
}

TEST_CASE("attention: the Intel MKL model's threaded forms match the interpreter") {
  const int compared = intel_threaded_forms_vs_interpreter(Target::cpu);
  CHECK(compared == 14);  // out of 5 forwards; dq, dk, dv of 3 backwards
  MESSAGE(fmt::format("{} outputs compared bitwise", compared));
}
