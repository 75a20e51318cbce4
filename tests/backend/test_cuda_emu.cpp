// Target cuda-emu against the interpreter, bit for bit, over the sweep the CPU backend is tested
// on (sweep.hpp): the CUDA source NVRTC compiles, built by the host compiler over
// templates/simt_emu.hpp, run on the CPU. Every order runs but the device-only ones, which call
// CUDA's own functions (Op::Call) and have no meaning off the GPU.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "backends/cuda/cuda_backend.hpp"
#include "gen/gen.hpp"
#include "ir/error.hpp"
#include "sweep.hpp"

using namespace ordo;
using namespace ordo::backend_sweep;

namespace {

Request request_for(OpKind op, const Variant& v, int64_t n) {
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
  return r;
}

// Compiles every request for cuda-emu on all cores (each compile is a host-compiler process);
// errors are left for the comparison loop to report.
void precompile(const std::vector<Request>& requests) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  const unsigned n = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned t = 0; t < n; ++t)
    workers.emplace_back([&] {
      for (size_t i = next++; i < requests.size(); i = next++) {
        Request r = requests[i];
        r.target = Target::cuda_emu;
        try {
          compile(r);
        } catch (const std::exception&) {
        }
      }
    });
  for (std::thread& w : workers) w.join();
}

void sweep_emu(OpKind op) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<Request> exact;
  std::set<std::string> seen;
  size_t variant = 0;
  for (const Variant& v : variants(op))
    for (int64_t n : emu_widths(variant++)) {
      Request r = request_for(op, v, n);
      // e.g. torch-cuda-tree needs N % 4 == 0; an alias's kernel is compared once
      if (gen::takes_shape(r) && !seen_kernel(r, Target::cuda_emu, seen)) exact.push_back(r);
    }
  precompile(exact);
  int compared = 0;
  for (const Request& r : exact) {
    const std::vector<uint8_t> x = sweep_x(r.x_dtype, r.cols);
    const auto want = run_on(r, Target::interpreter, x);
    const auto got = run_on(r, Target::cuda_emu, x);
    Request er = r;
    er.target = Target::cuda_emu;
    KernelHandle k = compile(er);
    size_t o = 0;
    for (const ArgSpec& a : k->args()) {
      if (!a.output) continue;
      INFO(fmt::format("{} order={} dtype={} weight={} N={} backend=cuda-emu output={}", name(op), r.order, name(r.x_dtype),
                       name(r.weight_type()), r.cols, a.name));
      CHECK(count_identical(a.dtype, got[o], want[o]) == a.elements(kRows, r.cols));
      ++o;
    }
    ++compared;
  }
  CHECK(compared > 0);
  MESSAGE(fmt::format("{}: {} (order, dtype, N) cases bitwise equal on cuda-emu, {:.0f} s", name(op), compared,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
}

}  // namespace

TEST_CASE("layer_norm: cuda-emu matches the interpreter bit for bit") { sweep_emu(OpKind::layer_norm); }
TEST_CASE("rms_norm_backward: cuda-emu matches the interpreter bit for bit (all stages)") {
  const int cases = backward_vs_interpreter(OpKind::rms_norm_backward, Target::cuda_emu, {1, 7, 9, 40}, {1, 7, 33}, /*sparse=*/true);
  MESSAGE(fmt::format("rms_norm_backward: {} requests compared bitwise on cuda-emu", cases));
}
TEST_CASE("layer_norm_backward: cuda-emu matches the interpreter bit for bit (both stages)") {
  const int cases = backward_vs_interpreter(OpKind::layer_norm_backward, Target::cuda_emu, {1, 9, 17, 129}, {1, 7, 33}, /*sparse=*/true);
  MESSAGE(fmt::format("layer_norm_backward: {} requests compared bitwise on cuda-emu", cases));
}
TEST_CASE("softmax_backward, log_softmax_backward: cuda-emu matches the interpreter bit for bit") {
  // 9: an 8-lane tail (16-bit: two halves, short row); 33: a 16-lane tail (16-bit: 32 + 1). Rows 1
  // and several in rotation: the one-row launch takes torch2.15-cpu-*(threads=2)'s fused tail.
  for (OpKind op : {OpKind::softmax_backward, OpKind::log_softmax_backward}) {
    const int cases = backward_vs_interpreter(op, Target::cuda_emu, {9, 33}, {1, 7, 2}, /*sparse=*/true);
    MESSAGE(fmt::format("{}: {} requests compared bitwise on cuda-emu", name(op), cases));
  }
}
TEST_CASE("rms_norm: cuda-emu matches the interpreter bit for bit") { sweep_emu(OpKind::rms_norm); }
TEST_CASE("var_mean: cuda-emu matches the interpreter bit for bit") { sweep_emu(OpKind::var_mean); }
TEST_CASE("sum: cuda-emu matches the interpreter bit for bit") { sweep_emu(OpKind::sum); }
TEST_CASE("mean: cuda-emu matches the interpreter bit for bit") { sweep_emu(OpKind::mean); }
TEST_CASE("silu: cuda-emu matches the interpreter bit for bit") { sweep_emu(OpKind::silu); }
TEST_CASE("silu_backward: cuda-emu matches the interpreter bit for bit") {
  const int cases = backward_vs_interpreter(OpKind::silu_backward, Target::cuda_emu, {9, 65}, {1, 7}, /*sparse=*/true);
  MESSAGE(fmt::format("silu_backward: {} requests compared bitwise on cuda-emu", cases));
}
TEST_CASE("gelu_tanh: cuda-emu matches the interpreter bit for bit") { sweep_emu(OpKind::gelu_tanh); }
TEST_CASE("gelu and gelu_backward (oneDNN's forms and fast): cuda-emu matches the interpreter bit for bit") {
  const int cases = gelu_vs_interpreter(Target::cuda_emu, {7, 17, 129}, {3, 2});
  MESSAGE(fmt::format("gelu: {} requests compared bitwise on cuda-emu", cases));
  CHECK(cases >= 2 * 2 * 3);
}
TEST_CASE("cross_entropy and its backward: cuda-emu matches the interpreter bit for bit") {
  const int cases = cross_entropy_vs_interpreter(Target::cuda_emu, {7, 17, 129}, {17, 5, 257}, 40000);
  MESSAGE(fmt::format("cross_entropy: {} requests compared bitwise on cuda-emu", cases));
  CHECK(cases > 0);
}
TEST_CASE("gelu_tanh_backward: cuda-emu matches the interpreter bit for bit") {
  const int cases = backward_vs_interpreter(OpKind::gelu_tanh_backward, Target::cuda_emu, {9, 65}, {1, 7}, /*sparse=*/true);
  MESSAGE(fmt::format("gelu_tanh_backward: {} requests compared bitwise on cuda-emu", cases));
}
TEST_CASE("cuda-emu: silu's and gelu_tanh's per-thread chunks and tails (torch2.15 orders, threads=T) match the interpreter") {
  MESSAGE(silu_chunks_vs_interpreter(Target::cuda_emu) << " launches compared bitwise");
}
TEST_CASE("softmax: cuda-emu matches the interpreter bit for bit") { sweep_emu(OpKind::softmax); }
TEST_CASE("log_softmax: cuda-emu matches the interpreter bit for bit") { sweep_emu(OpKind::log_softmax); }

TEST_CASE("cuda-emu: grid_extent-dependent rounding (torch-decomp-cpu-avx2, bf16) matches the interpreter") {
  // Row counts on both sides of the 16-row vector boundary and over one 128-thread block.
  launch_dependent_vs_interpreter(Target::cuda_emu, {15, 16, 37, 300});
}

TEST_CASE("cuda-emu: rms_norm's single-row thread split (torch2.15 orders, threads=T) matches the interpreter") {
  thread_split_vs_interpreter(Target::cuda_emu);
}

TEST_CASE("cuda-emu: the inductor2.15 orders' thread splits (threads=T) match the interpreter") {
  inductor_split_vs_interpreter(Target::cuda_emu, true);
}

TEST_CASE("cuda-emu: a misaligned buffer is refused, naming it") {
  Request r;
  r.op = OpKind::softmax;
  r.cols = 64;
  r.order = "fast";
  r.target = Target::cuda_emu;
  KernelHandle k = compile(r);
  std::vector<float> x(2 * 64 + 1, 1.0f), y(2 * 64 + 1, 0.0f);
  // x + 1 is 4 bytes past a 16-byte boundary at most: misaligned for 128-bit loads whenever
  // x is 16-byte aligned, which operator new guarantees here.
  REQUIRE(reinterpret_cast<uintptr_t>(x.data()) % 16 == 0);
  CHECK_THROWS_WITH_AS(k->run({{x.data() + 1, 128, ScalarType::f32}, {y.data(), 128, ScalarType::f32}}, 2),
                       doctest::Contains("x: address"), Error);
  CHECK_NOTHROW(k->run({{x.data(), 128, ScalarType::f32}, {y.data(), 128, ScalarType::f32}}, 2));
}

// layer_norm_backward's and rms_norm_backward's centered orders with a block tree (fast,
// batch-invariant) have two schedules of one order (gen/ops/layer_norm_backward.cpp): the CPU's one
// pass, whose instances each take a block of rows and leave its sums in a workspace, and CUDA's
// two stages, whose column stage sums the rows itself. Row counts on both sides of the block
// sizes (32 and 64) and of a second tree level; N across the vector width and its tail; every
// combination of weight and bias; the mixed 16-bit x with f32 weight; rms_norm's rstd given and
// recomputed (then also an output, which the one pass reads back for dweight).
TEST_CASE("layer_norm_backward, rms_norm_backward: the CPU's one-pass schedule gives the bits of CUDA's two stages") {
  struct Case {
    OpKind op;
    const char* order;
    ScalarType dtype;
    std::optional<ScalarType> weight;
    bool has_weight, has_bias;
    int64_t n, rows;
    bool saved_stats = true;
  };
  const OpKind ln = OpKind::layer_norm_backward, rms = OpKind::rms_norm_backward;
  const Case cases[] = {
      {ln, "fast", ScalarType::f32, std::nullopt, true, true, 20, 130},
      {ln, "fast", ScalarType::f32, std::nullopt, true, false, 1, 64},
      {ln, "fast", ScalarType::f32, std::nullopt, false, true, 33, 65},
      {ln, "fast", ScalarType::bf16, std::nullopt, true, true, 100, 63},
      {ln, "fast", ScalarType::bf16, ScalarType::f32, true, true, 17, 200},
      {ln, "fast", ScalarType::f16, std::nullopt, true, true, 16, 129},
      {ln, "batch-invariant", ScalarType::f32, std::nullopt, true, true, 7, 97},
      {ln, "batch-invariant", ScalarType::bf16, std::nullopt, true, false, 48, 33},
      {rms, "fast", ScalarType::f32, std::nullopt, true, false, 20, 130},
      {rms, "fast", ScalarType::bf16, std::nullopt, true, false, 33, 65, false},
      {rms, "fast", ScalarType::f16, std::nullopt, true, false, 1, 64, false},
      {rms, "batch-invariant", ScalarType::f32, std::nullopt, true, false, 100, 97},
  };
  int compared = 0;
  for (const Case& c : cases) {
    Request r;
    r.op = c.op;
    r.order = c.order;
    r.x_dtype = c.dtype;
    r.weight_dtype = c.weight;
    r.allow_mixed_dtypes = c.weight.has_value();
    r.has_weight = c.has_weight;
    r.has_bias = c.has_bias;
    r.saved_stats = c.saved_stats;
    r.cols = c.n;
    INFO(fmt::format("{} {} {} weight={} bias={} rstd given={} N={} rows={}", name(c.op), c.order, name(c.dtype), c.has_weight, c.has_bias,
                     c.saved_stats, c.n, c.rows));
    r.target = Target::cpu;
    const std::vector<ir::Kernel> cpu = gen::build_stages(r, gen::resolve(r));
    REQUIRE(cpu.size() == 2);
    CHECK(cpu[0].rows_per_instance > 1);
    const auto on_cpu = outputs_of(r, c.rows, 17 + uint64_t(compared), 0.25, 2.0);
    r.target = Target::cuda_emu;
    CHECK(gen::build_stages(r, gen::resolve(r))[0].rows_per_instance == 1);
    const auto on_emu = outputs_of(r, c.rows, 17 + uint64_t(compared), 0.25, 2.0);
    REQUIRE(on_cpu.size() == on_emu.size());
    for (size_t o = 0; o < on_cpu.size(); ++o) {
      INFO("output " << o << " (in argument order)");
      CHECK(on_cpu[o] == on_emu[o]);
    }
    ++compared;
  }
  MESSAGE(fmt::format("norm backward: {} cases, CPU one-pass schedule against CUDA's two stages, bitwise", compared));
}

// Attention on cuda-emu: the shapes of the CPU test in the full tier, else the reduced ones, each
// causal or not in rotation (each attention kernel is a host-compiler run of about a second).
TEST_CASE("attention with a mask: cuda-emu matches the interpreter bit for bit, forward and backward") {
  const int forward = masked_attention_vs_interpreter(Target::cuda_emu, OpKind::attention);
  const int backward = masked_attention_vs_interpreter(Target::cuda_emu, OpKind::attention_backward);
  MESSAGE(fmt::format("masked attention on cuda-emu: {} forward and {} backward cases compared bitwise", forward, backward));
}

TEST_CASE("attention_backward: cuda-emu matches the interpreter bit for bit (both stages)") {
  const int cases = attention_backward_vs_interpreter(Target::cuda_emu, /*sparse=*/true);
  MESSAGE(fmt::format("attention_backward on cuda-emu: {} cases compared bitwise", cases));
}
// The tiled backward (fast, flash) has two schedules of one order (gen/ops/attention_backward.cpp):
// the CPU's one kernel per (batch, head), which sums dq along with dk and dv, and CUDA's two
// stages. Their bits must be the order's, whichever ran: the CPU backend against cuda-emu, causal
// and not, lse given and recomputed in alternation, S across the vector width and its tails, D
// in one, two and odd numbers of vectors and (3 lanes) with a tail, the 16-bit dq accumulator in
// scratch and, past its bound, the CPU's fallback to the two stages.
TEST_CASE("attention_backward: the CPU's one-kernel schedule gives the bits of CUDA's two stages") {
  struct Case {
    const char* order;
    ScalarType dtype;
    int64_t sq, sk, d;
    size_t cpu_stages;
  };
  const Case cases[] = {
      {"fast", ScalarType::f32, 37, 45, 32, 1},  {"fast", ScalarType::f32, 9, 8, 8, 1},
      {"fast", ScalarType::f32, 1, 19, 72, 1},   {"fast(queries=1)", ScalarType::f32, 20, 3, 24, 1},
      {"flash", ScalarType::f32, 16, 33, 64, 1}, {"flash(queries=3,fma=all)", ScalarType::f32, 11, 23, 16, 1},
      {"fast", ScalarType::bf16, 13, 29, 40, 1}, {"flash", ScalarType::f16, 21, 16, 8, 1},
      {"fast", ScalarType::bf16, 4097, 1, 64, 2},  // S_q x D floats over the scratch bound: two stages on the CPU too
  };
  int compared = 0, rotation = 0;
  for (const Case& c : cases)
    for (int variant : {rotation % 4, (rotation + 1) % 4}) {  // both causal modes; lse given, then recomputed, by case
      ++rotation;
      Request r;
      r.op = OpKind::attention_backward;
      r.order = c.order;
      r.x_dtype = c.dtype;
      r.seq_q = c.sq;
      r.seq_k = c.sk;
      r.cols = c.d;
      r.causal = variant % 2 == 1;
      r.saved_stats = variant < 2;
      r.has_weight = r.has_bias = false;
      INFO(fmt::format("{} {} Sq={} Sk={} D={} causal={} lse={}", c.order, name(c.dtype), c.sq, c.sk, c.d, r.causal, r.saved_stats));
      r.target = Target::cpu;
      CHECK(gen::build_stages(r, gen::resolve(r)).size() == c.cpu_stages);
      const auto on_cpu = outputs_of(r, 2, 31 + uint64_t(compared), 0, 1.5);
      r.target = Target::cuda_emu;
      CHECK(gen::build_stages(r, gen::resolve(r)).size() == 2);
      const auto on_emu = outputs_of(r, 2, 31 + uint64_t(compared), 0, 1.5);
      REQUIRE(on_cpu.size() == 3);
      for (size_t o = 0; o < on_cpu.size(); ++o) {
        INFO("output " << o << " (dq, dk, dv)");
        CHECK(on_cpu[o] == on_emu[o]);
      }
      ++compared;
    }
  MESSAGE(fmt::format("attention_backward: {} cases, CPU schedule against CUDA's, bitwise", compared));
}

// The fused kernel's scratch that grows with S_q (D_i of every query, lse when recomputed, 16-bit
// dq's f32 sum) stays within 1 MiB of the running thread's stack; past it the CPU runs the two
// stages. Only the schedule is checked here: the test above runs both on the same bits.
TEST_CASE("attention_backward: the CPU runs the two stages where the one kernel's scratch would pass 1 MiB") {
  struct Case {
    ScalarType dtype;
    int64_t sq, d;
    bool lse;
    size_t cpu_stages;
  };
  const Case cases[] = {
      {ScalarType::f32, 262144, 8, true, 1},    // D_i: 1 MiB
      {ScalarType::f32, 262145, 8, true, 2},    // D_i: past it
      {ScalarType::f32, 262144, 8, false, 2},   // D_i and lse: 2 MiB
      {ScalarType::f32, 131072, 8, false, 1},   // D_i and lse: 1 MiB
      {ScalarType::bf16, 4000, 64, true, 1},    // D_i and dq's sum: 1,040,000 bytes
      {ScalarType::bf16, 4096, 64, true, 2},    // 1,064,960 bytes
  };
  for (const Case& c : cases) {
    Request r;
    r.op = OpKind::attention_backward;
    r.order = "fast";
    r.x_dtype = c.dtype;
    r.seq_q = c.sq;
    r.seq_k = 3;
    r.cols = c.d;
    r.saved_stats = c.lse;
    r.has_weight = r.has_bias = false;
    r.target = Target::cpu;
    INFO(fmt::format("{} Sq={} D={} lse={}", name(c.dtype), c.sq, c.d, c.lse));
    CHECK(gen::build_stages(r, gen::resolve(r)).size() == c.cpu_stages);
  }
}

// Scratch lives on the running thread's stack (the caller's, on one thread; std::thread's 8 MiB
// by default in the pool). Every CPU attention and attention_backward kernel at the largest head
// dim and long sequences keeps it within half of that.
TEST_CASE("attention: every CPU kernel's scratch stays within 4 MiB at D = 512") {
  constexpr int64_t kBound = int64_t(4) << 20;
  int64_t largest = 0, kernels = 0;
  std::string largest_name;
  for (const gen::NamedOrder& n : gen::named_orders())
    for (OpKind op : n.ops) {
      if (op != OpKind::attention && op != OpKind::attention_backward) continue;
      if (n.device_only) continue;
      for (ScalarType t : n.dtypes)
        for (int64_t s : {int64_t(1000), int64_t(4096)}) {
          Request r;
          r.op = op;
          r.order = std::string(n.name);
          r.x_dtype = t;
          r.seq_q = r.seq_k = s;
          r.cols = 512;
          r.has_weight = r.has_bias = false;
          r.target = Target::cpu;
          std::vector<ir::Kernel> stages;
          try {
            stages = gen::build_stages(r, gen::resolve(r));
          } catch (const Error&) {
            continue;  // an order that refuses this dtype or host here
          }
          for (const ir::Kernel& k : stages) {
            int64_t bytes = 0;
            for (const ir::Buffer& b : k.buffers)
              if (!ir::is_argument(b)) bytes += b.per_row * size_bytes(b.elem);
            const std::string what = fmt::format("{} {} {} S={} ({})", name(op), n.name, name(t), s, k.name);
            INFO(what);
            CHECK(bytes <= kBound);
            if (bytes > largest) largest = bytes, largest_name = what;
            ++kernels;
          }
        }
    }
  CHECK(kernels > 20);
  MESSAGE(fmt::format("{} kernels; the most scratch: {} bytes, {}", kernels, largest, largest_name));
}

TEST_CASE("attention: cuda-emu matches the interpreter bit for bit") {
  const int cases = attention_vs_interpreter(Target::cuda_emu, !full_sweep());
  CHECK(cases > 0);
  MESSAGE(fmt::format("attention on cuda-emu: {} cases compared bitwise", cases));
}

TEST_CASE("attention: the Intel MKL model's threaded forms match the interpreter") {
  const int compared = intel_threaded_forms_vs_interpreter(Target::cuda_emu);
  CHECK(compared == 14);  // out of 5 forwards; dq, dk, dv of 3 backwards
  MESSAGE(fmt::format("{} outputs compared bitwise", compared));
}
