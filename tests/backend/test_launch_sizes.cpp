// Sizes given at launch (ir::Kernel::sizes): attention with S_k as a launch argument
// (Request::seq_k_at_launch) gives, at every S_k, the bits of the kernel built for that S_k, on
// the interpreter, the CPU backend and cuda-emu; one kernel serves every S_k.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

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

// Runs `launch` (S_k at launch) on the inputs of `fixed` (built for S_k = sk, already run on
// `in`), and counts the outputs whose every element has the fixed kernel's bits.
void check_same_bits(const CompiledKernel& launch, HostBuffers& in, const std::vector<std::vector<uint8_t>>& want, int64_t sk,
                     const std::string& what) {
  std::vector<std::vector<uint8_t>> bytes = in.bytes;
  std::vector<BufferRef> refs;
  for (size_t i = 0; i < in.args.size(); ++i) {
    if (in.args[i].output) std::fill(bytes[i].begin(), bytes[i].end(), uint8_t(0));
    refs.push_back(BufferRef{bytes[i].data(), static_cast<int64_t>(bytes[i].size() / size_bytes(in.args[i].dtype)), in.args[i].dtype});
  }
  launch.run_with_sizes(refs, kHeads, {sk});
  size_t o = 0;
  for (size_t i = 0; i < in.args.size(); ++i) {
    if (!in.args[i].output) continue;
    INFO(what << " output=" << in.args[i].name);
    CHECK(count_identical(in.args[i].dtype, bytes[i], want[o]) == static_cast<int64_t>(want[o].size() / size_bytes(in.args[i].dtype)));
    ++o;
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
              std::vector<std::vector<uint8_t>> want;
              for (size_t i = 0; i < in.args.size(); ++i)
                if (in.args[i].output) want.push_back(in.bytes[i]);
              check_same_bits(*launch, in, want, sk,
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
  CHECK_THROWS_WITH_AS(compile(r), doctest::Contains("S_k at launch is the forward attention's"), Error);
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
