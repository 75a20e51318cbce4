// Sizes given at launch (ir::Kernel::sizes): attention with S_k as a launch argument
// (Request::seq_k_at_launch) gives, at every S_k, the bits of the kernel built for that S_k, on
// the interpreter, the CPU backend and cuda-emu; one kernel serves every S_k. The row ops with N
// at launch (Request::cols_at_launch) likewise, for every named order that takes it.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gen/gen.hpp"
#include "ir/error.hpp"
#include "ir/float_bits.hpp"
#include "ordo/compare.hpp"
#include "ordo/ordo.hpp"

using namespace ordo;

namespace {

constexpr int64_t kHeads = 3;  // launch rows: (batch, head) pairs
constexpr int64_t kD = 32;

Request attention(const std::string& order, ScalarType dtype, int64_t sq, bool causal, Target target) {
  Request r;
  r.op = OpKind::attention;
  r.order = order;
  r.x_dtype = dtype;
  r.has_weight = r.has_bias = false;
  r.cols = kD;
  r.seq_q = sq;
  r.causal = causal;
  r.lse_output = true;
  r.target = target;
  return r;
}

// Element `at` of input `name` set to v (rounded to a 16-bit dtype): the special values planted.
void set_value_bits(HostBuffers& in, const char* name, ScalarType dtype, int64_t at, float v) {
  std::vector<uint8_t>& b = in.get(name);
  if (dtype == ScalarType::f32) {
    std::memcpy(b.data() + 4 * at, &v, 4);
  } else {
    const uint16_t bits = dtype == ScalarType::bf16 ? f32_to_bf16_bits(v) : f32_to_f16_bits(v);
    std::memcpy(b.data() + 2 * at, &bits, 2);
  }
}

// Runs `launch` (a kernel taking `sizes` at launch) over `rows` rows on a copy of `in`, whose
// outputs hold what the kernel built for those sizes wrote (it already ran on `in`), and checks
// that every element of every output has its bits.
void check_same_bits(const CompiledKernel& launch, const HostBuffers& in, int64_t rows, const std::vector<int64_t>& sizes,
                     const std::string& what) {
  std::vector<std::vector<uint8_t>> bytes = in.bytes;
  std::vector<BufferRef> refs;
  for (size_t i = 0; i < in.args.size(); ++i) {
    if (in.args[i].output) std::fill(bytes[i].begin(), bytes[i].end(), uint8_t(0));
    refs.push_back(BufferRef{bytes[i].data(), static_cast<int64_t>(bytes[i].size() / size_bytes(in.args[i].dtype)), in.args[i].dtype});
  }
  launch.run_with_sizes(refs, rows, sizes);
  for (size_t i = 0; i < in.args.size(); ++i) {
    if (!in.args[i].output) continue;
    INFO(what << " output=" << in.args[i].name);
    CHECK(count_identical(in.args[i].dtype, bytes[i], in.bytes[i]) == static_cast<int64_t>(bytes[i].size() / size_bytes(in.args[i].dtype)));
  }
}

}  // namespace

TEST_CASE("attention with S_k at launch: the bits of the kernel built for each S_k, one kernel for all") {
  struct Case {
    std::string order;
    std::vector<ScalarType> dtypes;
    std::vector<int64_t> sk;  // both sides of the key block (and key group) boundaries
  };
  const std::vector<Case> cases = {
      {"fast", {ScalarType::f32, ScalarType::bf16, ScalarType::f16}, {1, 2, 7, 8, 9, 63, 64, 65, 127, 130}},
      {"flash", {ScalarType::f32, ScalarType::bf16}, {1, 15, 16, 17, 64, 65, 100}},
      {"flash(bc=16,queries=4)", {ScalarType::f32}, {1, 15, 16, 17, 33, 50}},
      {"flash(bc=8,exp2=on,scale=multiply,fma=all)", {ScalarType::f32}, {3, 8, 9, 24, 29}},
  };
  int compared = 0;
  for (const Case& c : cases)
    for (ScalarType dtype : c.dtypes)
      for (int64_t sq : {int64_t(1), int64_t(5)})
        for (bool causal : {false, true}) {
          // cuda-emu builds each kernel with the host compiler: the first two orders' f32 and bf16.
          std::vector<Target> targets = {Target::cpu, Target::interpreter};
          if ((c.order == "fast" || c.order == "flash(bc=16,queries=4)") && dtype != ScalarType::f16) targets.push_back(Target::cuda_emu);
          for (Target target : targets) {
            Request at_launch = attention(c.order, dtype, sq, causal, target);
            at_launch.seq_k_at_launch = true;
            const uint64_t misses = cache_stats().misses;
            KernelHandle launch = compile(at_launch);
            CHECK(cache_stats().misses == misses + 1);  // a new kernel, built once for every S_k below
            REQUIRE(launch->sizes() == std::vector<std::string>{"S_k"});
            for (int64_t sk : c.sk) {
              Request fixed = attention(c.order, dtype, sq, causal, Target::cpu);
              fixed.seq_k = sk;
              KernelHandle k = compile(fixed);
              HostBuffers in = make_buffers(*k, kHeads, static_cast<uint64_t>(sk * 7 + sq), 0.0, 2.0);
              if (sk % 3 == 0) {  // specials: a NaN query element, an infinite value, a huge key
                set_value_bits(in, "q", dtype, 1, NAN);
                set_value_bits(in, "v", dtype, kD + 2, INFINITY);
                set_value_bits(in, "k", dtype, 0, 1e30f);
              }
              k->run(in.refs(kHeads, kD), kHeads);
              check_same_bits(*launch, in, kHeads, {sk},
                              fmt::format("order={} dtype={} Sq={} Sk={} causal={} target={}", c.order, name(dtype), sq, sk, causal,
                                          name(target)));
              ++compared;
            }
            CHECK(compile(at_launch) == launch);  // still the one kernel
          }
        }
  MESSAGE(compared << " (order, dtype, S_q, causal, target, S_k) cases compared");
  CHECK(compared > 300);
}

TEST_CASE("masked attention with S_k at launch: a mask that spans the keys is S_k long at each launch, with the fixed kernel's bits") {
  // (order, dtype, mask spans, S_q): masks with and without a batch, head, query or key dim, on
  // the queries-in-lanes layout (S_q 5, 9) and the decode one (S_q 1, keys in lanes).
  struct Case {
    std::string order;
    ScalarType dtype;
    const char* mask;
    int64_t sq;
  };
  const std::vector<Case> cases = {
      {"fast", ScalarType::f32, "B1QK", 1},   {"fast", ScalarType::f32, "BHQK", 5},  {"fast", ScalarType::bf16, "11QK", 1},
      {"fast", ScalarType::f32, "1HQK", 9},   {"fast", ScalarType::f16, "B11K", 5},  {"fast", ScalarType::f32, "11Q1", 5},
      {"flash", ScalarType::f32, "B11K", 1},  {"flash", ScalarType::bf16, "BHQK", 5}, {"flash(bc=16,queries=4)", ScalarType::f32, "B1QK", 9},
  };
  constexpr int64_t kBatchHeads = 2;  // heads per batch: 6 launch rows are 3 batches
  int compared = 0;
  for (const Case& c : cases) {
    std::vector<Target> targets = {Target::cpu, Target::interpreter};
    if (c.order == "fast" && c.dtype == ScalarType::f32) targets.push_back(Target::cuda_emu);
    for (Target target : targets) {
      Request at_launch = attention(c.order, c.dtype, c.sq, false, target);
      at_launch.heads = kBatchHeads;
      at_launch.mask = AttentionMask::parse(fmt::format("{}:{}", name(c.dtype), c.mask));  // the inputs' dtype (f32 for f32)
      at_launch.seq_k_at_launch = true;
      KernelHandle launch = compile(at_launch);
      REQUIRE(launch->sizes() == std::vector<std::string>{"S_k"});
      for (int64_t sk : {int64_t(1), int64_t(7), int64_t(16), int64_t(17), int64_t(64), int64_t(65), int64_t(100)}) {
        Request fixed = at_launch;
        fixed.seq_k_at_launch = false;
        fixed.seq_k = sk;
        fixed.target = Target::cpu;
        KernelHandle k = compile(fixed);
        HostBuffers in = make_buffers(*k, 6, static_cast<uint64_t>(sk * 11 + c.sq), 0.0, 2.0);
        std::vector<uint8_t>& mask = in.get("mask");
        for (size_t e = 0; e < mask.size() / size_bytes(c.dtype); e += 3) set_value_bits(in, "mask", c.dtype, int64_t(e), -INFINITY);
        k->run(in.refs(6, kD), 6);
        check_same_bits(*launch, in, 6, {sk},
                        fmt::format("order={} dtype={} mask={} Sq={} Sk={} target={}", c.order, name(c.dtype), c.mask, c.sq, sk, name(target)));
        ++compared;
      }
      CHECK(compile(at_launch) == launch);
    }
  }
  MESSAGE(compared << " masked (order, dtype, mask, S_q, target, S_k) cases compared");
  CHECK(compared > 100);
}

TEST_CASE("attention_backward with S_k at launch: dq, dk and dv of the kernel built for each S_k, one kernel for all") {
  // The fused CPU kernel (an instance per (batch, head)): key blocks of L lanes taken W at a time
  // while all W are full (L = 16 and W = 2 on AVX-512 f32: steps of 32 keys), the rest one block
  // per step; S_k on both sides of those boundaries. The forward's lse is given (saved_stats).
  struct Case {
    std::string order;
    ScalarType dtype;
    std::vector<int64_t> sk;
  };
  const std::vector<Case> cases = {
      {"fast", ScalarType::f32, {1, 2, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 97}},
      {"fast", ScalarType::bf16, {1, 8, 9, 16, 17, 33, 64, 70}},
      {"flash", ScalarType::f32, {1, 7, 8, 9, 16, 17, 40}},
      {"fast", ScalarType::f16, {3, 16, 35}},
  };
  int compared = 0;
  for (const Case& c : cases)
    for (int64_t sq : {int64_t(1), int64_t(5), int64_t(19)})
      for (bool causal : {false, true})
        for (Target target : {Target::cpu, Target::interpreter}) {
          Request at_launch = attention(c.order, c.dtype, sq, causal, target);
          at_launch.op = OpKind::attention_backward;
          at_launch.lse_output = false;
          at_launch.seq_k_at_launch = true;
          KernelHandle launch = compile(at_launch);
          REQUIRE(launch->sizes() == std::vector<std::string>{"S_k"});
          for (int64_t sk : c.sk) {
            Request fixed = at_launch;
            fixed.seq_k_at_launch = false;
            fixed.seq_k = sk;
            fixed.target = Target::cpu;
            KernelHandle k = compile(fixed);
            HostBuffers in = make_buffers(*k, kHeads, static_cast<uint64_t>(sk * 13 + sq), 0.0, 2.0);
            if (sk % 3 == 0) {  // specials: a NaN dout element, an infinite value, a huge key
              set_value_bits(in, "dout", c.dtype, 1, NAN);
              set_value_bits(in, "v", c.dtype, kD + 2, INFINITY);
              set_value_bits(in, "k", c.dtype, 0, 1e30f);
            }
            k->run(in.refs(kHeads, kD), kHeads);
            check_same_bits(*launch, in, kHeads, {sk},
                            fmt::format("attention_backward order={} dtype={} Sq={} Sk={} causal={} target={}", c.order, name(c.dtype), sq,
                                        sk, causal, name(target)));
            ++compared;
          }
          CHECK(compile(at_launch) == launch);
        }
  // A mask that spans the keys is S_k long at each launch here too.
  for (const char* spans : {"B11K", "BHQK"}) {
    Request at_launch = attention("fast", ScalarType::f32, 5, false, Target::cpu);
    at_launch.op = OpKind::attention_backward;
    at_launch.lse_output = false;
    at_launch.heads = 3;
    at_launch.mask = AttentionMask::parse(fmt::format("f32:{}", spans));
    at_launch.seq_k_at_launch = true;
    KernelHandle launch = compile(at_launch);
    for (int64_t sk : {int64_t(1), int64_t(17), int64_t(33), int64_t(50)}) {
      Request fixed = at_launch;
      fixed.seq_k_at_launch = false;
      fixed.seq_k = sk;
      KernelHandle k = compile(fixed);
      HostBuffers in = make_buffers(*k, 6, static_cast<uint64_t>(sk * 5 + 1), 0.0, 2.0);
      std::vector<uint8_t>& mask = in.get("mask");
      for (size_t e = 0; e < mask.size() / 4; e += 4) set_value_bits(in, "mask", ScalarType::f32, int64_t(e), -INFINITY);
      k->run(in.refs(6, kD), 6);
      check_same_bits(*launch, in, 6, {sk}, fmt::format("attention_backward mask={} Sk={}", spans, sk));
      ++compared;
    }
  }
  MESSAGE(compared << " attention_backward (order, dtype, S_q, causal, target, S_k) cases compared");
  CHECK(compared > 300);
}

TEST_CASE("S_k at launch: what is refused, and why") {
  Request r = attention("torch2.15-cpu-avx512(mkl=amd)", ScalarType::f32, 1, false, Target::cpu);
  r.seq_k_at_launch = true;
  CHECK_THROWS_WITH_AS(compile(r), doctest::Contains("builds its attention for one S_k"), Error);
  r.order = "exact-tiled";
  CHECK_THROWS_WITH_AS(compile(r), doctest::Contains("builds its attention for one S_k"), Error);
  r.order = "fast";
  r.seq_k = 5;
  CHECK_THROWS_WITH_AS(compile(r), doctest::Contains("seq_k must be 0"), Error);
  r.seq_k = 0;
  r.op = OpKind::attention_backward;
  r.lse_output = false;
  r.saved_stats = false;
  CHECK_THROWS_WITH_AS(compile(r), doctest::Contains("takes the forward's lse"), Error);
  r.saved_stats = true;
  r.target = Target::cuda_emu;
  CHECK_THROWS_WITH_AS(compile(r), doctest::Contains("two stages, whose grids are cut by S_k (the CUDA targets)"), FixedLengthError);
  r.target = Target::cpu;
  r.order = "torch2.15-cpu-avx512(mkl=amd)";
  CHECK_THROWS_WITH_AS(compile(r), doctest::Contains("builds its attention for one S_k"), FixedLengthError);
  Request norm;
  norm.cols = 64;
  norm.order = "fast";
  norm.seq_k_at_launch = true;
  CHECK_THROWS_WITH_AS(compile(norm), doctest::Contains("are attention's"), Error);

  r = attention("fast", ScalarType::f32, 1, false, Target::cpu);
  r.seq_k_at_launch = true;
  KernelHandle k = compile(r);
  std::vector<float> q(kHeads * kD), kv(kHeads * kD * 10), out(kHeads * kD), lse(kHeads);
  auto refs = [&](int64_t kv_elements) {
    return std::vector<BufferRef>{{q.data(), int64_t(q.size()), ScalarType::f32},
                                  {kv.data(), kv_elements, ScalarType::f32},
                                  {kv.data(), kv_elements, ScalarType::f32},
                                  {out.data(), int64_t(out.size()), ScalarType::f32},
                                  {lse.data(), int64_t(lse.size()), ScalarType::f32}};
  };
  CHECK_THROWS_WITH_AS(k->run(refs(kHeads * kD * 10), kHeads), doctest::Contains("takes 1 size argument(s) at launch (S_k), got 0"), Error);
  CHECK_THROWS_WITH_AS(k->run_with_sizes(refs(kHeads * kD * 10), kHeads, {0}), doctest::Contains("S_k = 0 outside [1, 2^24]"), Error);
  CHECK_THROWS_WITH_AS(k->run_with_sizes(refs(kHeads * kD * 10), kHeads, {11}), doctest::Contains("S_k=11"), Error);
  k->run_with_sizes(refs(kHeads * kD * 10), kHeads, {10});
  Request fixed = attention("fast", ScalarType::f32, 1, false, Target::cpu);
  fixed.seq_k = 10;
  CHECK_THROWS_WITH_AS(compile(fixed)->run_with_sizes(refs(kHeads * kD * 10), kHeads, {10}), doctest::Contains("fixes every length at compile time"), Error);
}

namespace {

constexpr int64_t kRows = 3;

Request row_op(OpKind op, std::string_view order, ScalarType dtype, Target target) {
  Request r;
  r.op = op;
  r.order = std::string(order);
  r.x_dtype = dtype;
  r.target = target;
  r.has_weight = r.has_bias = op == OpKind::layer_norm || op == OpKind::rms_norm;
  if (op == OpKind::rms_norm) r.has_bias = false;
  return r;
}

// Lengths on both sides of every boundary of the lane trees and lane folds the orders use (8 and
// 16 lanes, 4 accumulators: 32 and 64 columns a group), and long rows; on the compiled targets also
// both sides of the 16384 exponentials softmax keeps.
const std::vector<int64_t> kLengths = {1,  2,  3,  5,  7,  8,  9,  15, 16, 17, 23, 24,  25,  31,  32,  33,  39,
                                       40, 41, 47, 48, 63, 64, 65, 95, 96, 97, 127, 128, 129, 200, 1000, 1031};
const std::vector<int64_t> kLongLengths = {16384, 16385, 20000};

}  // namespace

TEST_CASE("row ops with N at launch: every order that takes it gives the bits of the kernel built for each N") {
  const std::vector<OpKind> ops = {OpKind::layer_norm, OpKind::rms_norm, OpKind::var_mean, OpKind::softmax, OpKind::log_softmax,
                                   OpKind::sum, OpKind::mean, OpKind::silu, OpKind::gelu_tanh, OpKind::gelu};
  int compared = 0, refused = 0;
  std::vector<std::string> taken;
  for (const gen::NamedOrder& n : gen::named_orders())
    for (OpKind op : ops) {
      if (std::find(n.ops.begin(), n.ops.end(), op) == n.ops.end()) continue;
      for (ScalarType dtype : n.dtypes) {
        if (n.device_only) continue;
        Request one_n = row_op(op, n.name, dtype, Target::cpu);
        one_n.cols = 8;
        if (!gen::takes_shape(one_n)) continue;  // refused at every N (the torch2.15 orders' sum of 16-bit rows)
        try {
          (void)gen::resolve(one_n);
        } catch (const Error&) {
          continue;  // refused at a fixed N too: this host's model has no such kernel (gelu's 16-bit types without oneDNN's support)
        }
        Request at_launch = row_op(op, n.name, dtype, Target::cpu);
        at_launch.cols_at_launch = true;
        KernelHandle probe;
        try {
          probe = compile(at_launch);
        } catch (const Error& e) {
          INFO(std::string(n.name) << " " << name(op) << " " << name(dtype) << ": " << std::string(e.what()));
          CHECK(std::string(e.what()).find("for one N") != std::string::npos);
          ++refused;
          continue;
        }
        taken.push_back(fmt::format("{} {} {}", n.name, name(op), name(dtype)));
        // cuda-emu builds each kernel with the host compiler: fast's f32 and bf16, and one exact softmax per kind.
        std::vector<Target> targets = {Target::cpu, Target::interpreter};
        if ((n.name == "fast" && dtype != ScalarType::f16) || (n.name == "torch2.15-cpu-avx512" && dtype != ScalarType::f16))
          targets.push_back(Target::cuda_emu);
        for (Target target : targets) {
          at_launch.target = target;
          const uint64_t misses = cache_stats().misses;
          KernelHandle launch = compile(at_launch);
          CHECK(cache_stats().misses == misses + (target == Target::cpu ? 0 : 1));
          REQUIRE(launch->sizes() == std::vector<std::string>{"N"});
          std::vector<int64_t> lengths = kLengths;
          if (target != Target::interpreter) lengths.insert(lengths.end(), kLongLengths.begin(), kLongLengths.end());
          for (int64_t N : lengths) {
            Request fixed = row_op(op, n.name, dtype, Target::cpu);
            fixed.cols = N;
            KernelHandle k = compile(fixed);
            HostBuffers in = make_buffers(*k, kRows, static_cast<uint64_t>(N * 11 + int(op)), 0.5, 2.0);
            if (N % 3 == 0) {  // specials in the rows: NaN, infinities, a huge value
              set_value_bits(in, "x", dtype, N - 1, NAN);
              set_value_bits(in, "x", dtype, N + N / 2, INFINITY);
              set_value_bits(in, "x", dtype, 2 * N, N > 1 ? -INFINITY : 1e30f);
            } else if (N % 3 == 1) {
              set_value_bits(in, "x", dtype, N / 2, dtype == ScalarType::f32 ? 1e30f : 6e4f);
            }
            k->run(in.refs(kRows, N), kRows);
            check_same_bits(*launch, in, kRows, {N},
                            fmt::format("order={} op={} dtype={} N={} target={}", n.name, name(op), name(dtype), N, name(target)));
            ++compared;
          }
          CHECK(compile(at_launch) == launch);  // still the one kernel
        }
      }
    }
  std::string list;
  for (const std::string& t : taken) list += "\n  " + t;
  MESSAGE(compared << " (order, op, dtype, target, N) cases compared, " << refused << " (order, op, dtype) refused; taken:" << list);
  // The orders this must cover: fast on every row op, and PyTorch's f32 softmax kernels.
  for (const char* must : {"fast layer_norm f32", "fast rms_norm bf16", "fast var_mean f16", "fast softmax bf16", "fast log_softmax f32",
                           "torch2.15-cpu-avx2 layer_norm f32", "torch2.15-cpu-default layer_norm bf16", "torch2.15-cpu-avx512 layer_norm f16",
                           "torch2.15-cpu-avx2 rms_norm bf16", "torch1.13-cpu-avx2 layer_norm bf16",
                           "torch2.15-cpu-avx512 softmax f32", "torch2.15-cpu-avx2 log_softmax f32", "torch2.15-cpu-avx512 softmax bf16",
                           "torch2.15-cpu-default log_softmax f16", "torch2.15-cpu-avx2 softmax f16", "fast sum bf16",
                           "torch2.15-cpu-avx2 sum f32", "torch2.15-cpu-default mean bf16", "two-pass-lanes mean f32",
                           "torch2.15-cpu-avx512 silu f32", "torch2.15-cpu-avx2 silu bf16", "fast silu f16",
                           "torch2.15-cpu-avx512 gelu_tanh f32", "torch2.15-cpu-default gelu_tanh bf16", "fast gelu_tanh f16",
                           "torch2.15-cpu-avx2 gelu f32", "fast gelu bf16"}) {
    INFO(must);
    CHECK(std::find(taken.begin(), taken.end(), std::string(must)) != taken.end());
  }
  CHECK(compared > 1000);
  CHECK(refused > 0);
}

TEST_CASE("N at launch: PyTorch's split of one long rms_norm row between its threads, computed from N") {
  int compared = 0;
  for (const char* order : {"torch2.15-cpu-avx2(threads=2)", "torch2.15-cpu-default(threads=3)", "llama-rmsnorm-torch2.15-cpu-avx512(threads=2)"})
    for (ScalarType dtype : {ScalarType::f32, ScalarType::bf16})
      for (Target target : {Target::cpu, Target::interpreter}) {
        Request at_launch = row_op(OpKind::rms_norm, order, dtype, target);
        at_launch.cols_at_launch = true;
        KernelHandle launch = compile(at_launch);
        for (int64_t rows : {int64_t(1), int64_t(2)})
          for (int64_t N : {int64_t(32767), int64_t(32768), int64_t(32769), int64_t(40000), int64_t(65537), int64_t(98305)}) {
            Request fixed = row_op(OpKind::rms_norm, order, dtype, Target::cpu);
            fixed.cols = N;
            KernelHandle k = compile(fixed);
            HostBuffers in = make_buffers(*k, rows, static_cast<uint64_t>(N + rows), 1.0, 3.0);
            k->run(in.refs(rows, N), rows);
            check_same_bits(*launch, in, rows, {N},
                            fmt::format("order={} dtype={} rows={} N={} target={}", order, name(dtype), rows, N, name(target)));
            ++compared;
          }
      }
  MESSAGE(compared << " (order, dtype, target, rows, N) cases compared");
  CHECK(compared == 144);
}

TEST_CASE("N at launch: what is refused, and why") {
  Request r = row_op(OpKind::layer_norm, "inductor2.15-cpu-avx512", ScalarType::f32, Target::cpu);
  r.cols_at_launch = true;
  CHECK_THROWS_WITH_AS(compile(r), doctest::Contains("builds its layer_norm for one N"), Error);
  r.order = "numpy-two-pass";  // numpy's pairwise blocks
  CHECK_THROWS_WITH_AS(compile(r), doctest::Contains("builds its layer_norm for one N (its sum (pairwise"), Error);
  r.order = "onnxruntime-cpu";  // N <= 7 is its scalar fallback
  CHECK_THROWS_WITH_AS(compile(r), doctest::Contains("its arithmetic at N = 8 is not that at N = 1"), Error);
  r.order = "fast";
  r.cols = 64;
  CHECK_THROWS_WITH_AS(compile(r), doctest::Contains("cols must be 0, got 64"), Error);
  r.cols = 0;
  r.op = OpKind::layer_norm_backward;
  CHECK_THROWS_WITH_AS(compile(r), doctest::Contains("N at launch is for the row ops' forward"), Error);
  r = row_op(OpKind::rms_norm, "inductor2.15-cpu-avx2", ScalarType::f32, Target::cpu);
  r.cols_at_launch = true;
  CHECK_THROWS_WITH_AS(compile(r), doctest::Contains("for one N"), Error);

  r = row_op(OpKind::softmax, "fast", ScalarType::f32, Target::cpu);
  r.cols_at_launch = true;
  KernelHandle k = compile(r);
  std::vector<float> x(kRows * 10), y(kRows * 10);
  auto refs = [&](int64_t elements) {
    return std::vector<BufferRef>{{x.data(), elements, ScalarType::f32}, {y.data(), elements, ScalarType::f32}};
  };
  CHECK_THROWS_WITH_AS(k->run(refs(kRows * 10), kRows), doctest::Contains("takes 1 size argument(s) at launch (N), got 0"), Error);
  CHECK_THROWS_WITH_AS(k->run_with_sizes(refs(kRows * 10), kRows, {0}), doctest::Contains("N = 0 outside [1, 2^24]"), Error);
  CHECK_THROWS_WITH_AS(k->run_with_sizes(refs(kRows * 10), kRows, {11}), doctest::Contains("N=11"), Error);
  k->run_with_sizes(refs(kRows * 10), kRows, {10});
}
