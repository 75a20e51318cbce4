// Order resolution against models of other hosts (gen/host.hpp): the rules for Intel and AMD CPUs,
// with and without AVX-512 and its bf16/fp16 extensions, checked on whatever machine runs the test.
#include <doctest/doctest.h>

#include <string>

#include "gen/gen.hpp"
#include "gen/host.hpp"
#include "ir/error.hpp"

using namespace ordo;
using gen::HostModel;
using Gemm = ir::GemmOrder::Kind;
using OneDnn = ir::AttentionBackwardOrder::OneDnn;

namespace {

HostModel host(std::string_view name) {
  std::optional<HostModel> h = HostModel::named(name);
  REQUIRE_MESSAGE(h.has_value(), name);
  return *h;
}

// Every sub-order an op reads, printed: two resolutions agree when these texts do.
std::string text(const ir::Order& o) {
  return ir::describe(o.moments) + " | " + ir::describe(o.affine) + " | " + ir::describe(o.row_sum) + " | " +
         ir::describe(o.softmax) + " | " + ir::describe(o.attention) + " | " + ir::describe(o.norm_backward) + " | " +
         ir::describe(o.softmax_backward);
}

Request norm(OpKind op, std::string order, ScalarType dtype = ScalarType::f32) {
  Request r;
  r.op = op;
  r.cols = 4100;
  r.x_dtype = dtype;
  r.has_bias = op == OpKind::layer_norm;
  r.has_weight = op == OpKind::layer_norm || op == OpKind::rms_norm;
  r.order = std::move(order);
  return r;
}

Request attention(OpKind op, std::string order, ScalarType dtype = ScalarType::f32) {
  Request r;
  r.op = op;
  r.cols = 64;
  r.seq_q = r.seq_k = 96;
  r.x_dtype = dtype;
  r.has_weight = r.has_bias = false;
  r.order = std::move(order);
  return r;
}

}  // namespace

TEST_CASE("the torch2.15-cpu aliases resolve to the row of the capability PyTorch picks on the host") {
  for (OpKind op : {OpKind::layer_norm, OpKind::rms_norm, OpKind::softmax, OpKind::log_softmax_backward}) {
    for (ScalarType dtype : {ScalarType::f32, ScalarType::bf16}) {
      HostModel forced = host("amd-avx512");
      forced.aten_cpu_capability = "default";
      HostModel avx2_env = host("intel-avx512bf16");
      avx2_env.aten_cpu_capability = "avx2";
      const std::pair<HostModel, const char*> cases[] = {
          {host("intel-avx2"), "torch2.15-cpu-avx2"}, {host("amd-avx2"), "torch2.15-cpu-avx2"},
          {host("intel-avx512"), "torch2.15-cpu-avx512"}, {host("amd-avx512"), "torch2.15-cpu-avx512"},
          {forced, "torch2.15-cpu-default"}, {avx2_env, "torch2.15-cpu-avx2"}};
      for (const auto& [h, row] : cases) {
        CAPTURE(h.describe());
        CAPTURE(name(op));
        CHECK(text(gen::resolve(norm(op, "torch2.15-cpu", dtype), h)) == text(gen::resolve(norm(op, row, dtype), h)));
      }
    }
  }
  // The rows differ, so the comparison above tells them apart.
  const HostModel any = host("amd-avx512");
  CHECK(text(gen::resolve(norm(OpKind::softmax, "torch2.15-cpu-avx2"), any)) !=
        text(gen::resolve(norm(OpKind::softmax, "torch2.15-cpu-avx512"), any)));
  CHECK(text(gen::resolve(norm(OpKind::softmax, "torch2.15-cpu-default"), any)) !=
        text(gen::resolve(norm(OpKind::softmax, "torch2.15-cpu-avx2"), any)));
}

TEST_CASE("inductor2.15-cpu on a host without AVX2 is refused: Inductor emits scalar C++ there") {
  HostModel none;  // another vendor, no vector extensions
  CHECK_THROWS_WITH_AS(gen::resolve(norm(OpKind::softmax, "inductor2.15-cpu"), none),
                       doctest::Contains("Inductor would emit scalar C++"), Error);
  CHECK(text(gen::resolve(norm(OpKind::softmax, "inductor2.15-cpu"), host("amd-avx2"))) ==
        text(gen::resolve(norm(OpKind::softmax, "inductor2.15-cpu-avx2"), host("amd-avx2"))));
}

TEST_CASE("PyTorch's CPU attention takes the MKL kernels of the host's vendor and extensions") {
  for (const char* order : {"torch2.15-cpu-avx512", "torch2.15-cpu-math-avx512"}) {
    for (OpKind op : {OpKind::attention, OpKind::attention_backward}) {
      CAPTURE(order);
      const Request r = attention(op, order);
      CHECK(gen::resolve(r, host("amd-avx512")).attention.gemm.kind == Gemm::MklAmd);
      CHECK(gen::resolve(r, host("amd-avx2")).attention.gemm.kind == Gemm::MklAmd);
      CHECK(gen::resolve(r, host("intel-avx512")).attention.gemm.kind == Gemm::MklIntelAvx512);
      CHECK(gen::resolve(r, host("intel-avx512bf16")).attention.gemm.kind == Gemm::MklIntelAvx512Bf16);
      CHECK(gen::resolve(r, host("intel-avx512bf16")).attention_backward.gemm.kind == Gemm::MklIntelAvx512Bf16);
      CHECK_THROWS_WITH_AS(gen::resolve(r, host("intel-avx2")), doctest::Contains("neither an AMD CPU nor an Intel CPU with AVX-512"), Error);
      CHECK_FALSE(gen::takes_shape(r, host("intel-avx2")));
      CHECK(gen::takes_shape(r, host("amd-avx512")));
      // A named host overrides the running one: mkl=amd on an Intel AVX2 host.
      const Request named = attention(op, std::string(order) + "(mkl=amd)");
      CHECK(gen::resolve(named, host("intel-avx2")).attention.gemm.kind == Gemm::MklAmd);
    }
  }
}

TEST_CASE("MKL's thread count is the host's physical cores unless mkl_threads= names it") {
  HostModel six = host("intel-avx512");
  six.physical_cores = 6;
  CHECK(gen::resolve(attention(OpKind::attention, "torch2.15-cpu-avx512"), six).attention.gemm.mkl_threads == 6);
  CHECK(gen::resolve(attention(OpKind::attention, "torch2.15-cpu-avx512(mkl_threads=3)"), six).attention.gemm.mkl_threads == 3);
}

TEST_CASE("the 16-bit attention gradients go to the oneDNN kernel the host's extensions select") {
  const Request bf16 = attention(OpKind::attention_backward, "torch2.15-cpu-avx512", ScalarType::bf16);
  CHECK(gen::resolve(bf16, host("amd-avx512")).attention_backward.onednn_16bit == OneDnn::Avx512Bf16);
  CHECK(gen::resolve(bf16, host("intel-avx512bf16")).attention_backward.onednn_16bit == OneDnn::Avx512Bf16);
  CHECK(gen::resolve(bf16, host("intel-avx512")).attention_backward.onednn_16bit == OneDnn::Emulated);
  CHECK(gen::resolve(bf16, host("amd-avx2")).attention_backward.onednn_16bit == OneDnn::Off);
  HostModel ne_convert = host("amd-avx2");
  ne_convert.avx_ne_convert = true;  // PyTorch's oneDNN check passes; that kernel is not modelled
  CHECK_THROWS_WITH_AS(gen::resolve(bf16, ne_convert), doctest::Contains("AVX-NE-CONVERT without AVX-512"), Error);
  CHECK(gen::resolve(attention(OpKind::attention_backward, "torch2.15-cpu-avx512(onednn=off)", ScalarType::bf16), ne_convert)
            .attention_backward.onednn_16bit == OneDnn::Off);

  const Request f16 = attention(OpKind::attention_backward, "torch2.15-cpu-avx512", ScalarType::f16);
  CHECK(gen::resolve(f16, host("intel-avx512fp16")).attention_backward.onednn_16bit == OneDnn::Avx512Fp16);
  CHECK(gen::resolve(f16, host("intel-avx512bf16")).attention_backward.onednn_16bit == OneDnn::Off);
  CHECK(gen::resolve(f16, host("amd-avx512")).attention_backward.onednn_16bit == OneDnn::Off);
  HostModel f16_ne_convert = host("intel-avx512");
  f16_ne_convert.avx_ne_convert = true;
  CHECK_THROWS_WITH_AS(gen::resolve(f16, f16_ne_convert), doctest::Contains("AVX-NE-CONVERT without avx512_fp16"), Error);
}

TEST_CASE("gelu (the erf form) takes oneDNN's code for the host's ISA, and the 16-bit types where oneDNN takes them") {
  using GeluErf = ir::PointwiseOrder::GeluErf;
  const auto gelu = [](std::string order, ScalarType dtype, OpKind op = OpKind::gelu) {
    Request r = norm(OpKind::silu, std::move(order), dtype);
    r.op = op;
    return r;
  };
  // The capability does not matter: oneDNN reads the CPU.
  for (const char* order : {"torch2.15-cpu-default", "torch2.15-cpu-avx2", "torch2.15-cpu-avx512", "torch2.15-cpu"}) {
    INFO(order);
    CHECK(gen::resolve(gelu(order, ScalarType::f32), host("amd-avx512")).pointwise.gelu_erf == GeluErf::OneDnnMinimax);
    CHECK(gen::resolve(gelu(order, ScalarType::f32), host("intel-avx512")).pointwise.gelu_erf == GeluErf::OneDnnMinimax);
    CHECK(gen::resolve(gelu(order, ScalarType::f32), host("amd-avx2")).pointwise.gelu_erf == GeluErf::OneDnnAbramowitzStegun);
  }
  CHECK(gen::resolve(gelu("torch2.15-cpu(onednn_isa=avx2)", ScalarType::f32), host("amd-avx512")).pointwise.gelu_erf ==
        GeluErf::OneDnnAbramowitzStegun);
  CHECK(gen::resolve(gelu("torch2.15-cpu(onednn_isa=avx512_core)", ScalarType::f32), host("amd-avx2")).pointwise.gelu_erf ==
        GeluErf::OneDnnMinimax);
  CHECK_THROWS_WITH_AS(gen::resolve(gelu("torch2.15-cpu(onednn_isa=avx10)", ScalarType::f32), host("amd-avx512")),
                       doctest::Contains("onednn_isa=avx10 is not avx512_core or avx2"), Error);
  // bf16: oneDNN's flushing store with avx512_bf16; ATen's kernel or an emulated store elsewhere.
  CHECK(gen::resolve(gelu("torch2.15-cpu", ScalarType::bf16), host("amd-avx512")).pointwise.bf16_flushes_subnormals);
  CHECK(gen::resolve(gelu("torch2.15-cpu", ScalarType::bf16, OpKind::gelu_backward), host("intel-avx512bf16")).pointwise.bf16_flushes_subnormals);
  CHECK_THROWS_WITH_AS(gen::resolve(gelu("torch2.15-cpu", ScalarType::bf16), host("intel-avx512")), doctest::Contains("avx512_bf16"), Error);
  CHECK_THROWS_WITH_AS(gen::resolve(gelu("torch2.15-cpu", ScalarType::bf16), host("amd-avx2")), doctest::Contains("bf16 on a CPU without AVX-512"),
                       Error);
  CHECK_THROWS_WITH_AS(gen::resolve(gelu("torch2.15-cpu(onednn_isa=avx2)", ScalarType::bf16), host("amd-avx512")),
                       doctest::Contains("onednn_isa=avx2 is not modelled"), Error);
  // f16: oneDNN only with avx512_fp16 (PyTorch's mkldnn_fp16_device_check); ATen's erf kernel elsewhere.
  CHECK(gen::resolve(gelu("torch2.15-cpu", ScalarType::f16), host("intel-avx512fp16")).pointwise.gelu_erf == GeluErf::OneDnnMinimax);
  CHECK_THROWS_WITH_AS(gen::resolve(gelu("torch2.15-cpu", ScalarType::f16), host("amd-avx512")), doctest::Contains("f16 on a CPU without"), Error);
  // fast: the minimax form on every host, no flush.
  const ir::Order fast = gen::resolve(gelu("fast", ScalarType::bf16), host("amd-avx2"));
  CHECK(fast.pointwise.gelu_erf == GeluErf::OneDnnMinimax);
  CHECK_FALSE(fast.pointwise.bf16_flushes_subnormals);
}

TEST_CASE("host models by name") {
  for (std::string_view n : HostModel::names()) CHECK(HostModel::named(n).has_value());
  CHECK_FALSE(HostModel::named("intel-avx1024").has_value());
  CHECK(host("intel-avx512fp16").describe() == "intel, avx512, avx512_bf16, avx512_fp16, 2 cores");
  CHECK(host("amd-avx2").describe() == "amd, avx2, 2 cores");
}
