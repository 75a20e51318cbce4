// Requests that must be rejected, each with the message that names what is wrong.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>

#include "backends/cuda/cuda_backend.hpp"
#include "ir/error.hpp"
#include "ordo/ordo.hpp"

using namespace ordo;

namespace {
Request ok() {
  Request r;
  r.op = OpKind::layer_norm;
  r.cols = 128;
  r.order = "torch1.13-cpu-avx2";
  return r;
}
template <class F>
std::string error_of(F&& mutate) {
  Request r = ok();
  mutate(r);
  try {
    compile(r);
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}
}  // namespace

TEST_CASE("CUDA-native orders: device-only, shapes and shared memory are checked") {
  CHECK(error_of([](Request& r) { r.order = "torch-cuda"; }).find("order 'torch-cuda' is device-only") == 0);
  // Compiled with NVRTC (launching needs a GPU); a build without the toolkit says what is missing.
  CHECK(error_of([](Request& r) {
    r.order = "torch-cuda";
    r.target = Target::cuda;
  }) == (cuda_backend::nvrtc_available() ? std::string("(accepted)")
                                         : std::string("this ordo was built without NVRTC (CMake did not find the CUDA toolkit); "
                                                       "target cuda-emu runs the same source on the CPU")));
  CHECK(error_of([](Request& r) {
    r.order = "torch-cuda-tree";
    r.cols = 130;
  }) == "(accepted)");  // PyTorch's two-kernel path
  for (int64_t n : {130, 128})  // both kernels are fixed trees (a fuzzer found affine=scale-bias reaching gen/ops/team.cpp)
    CHECK(error_of([&](Request& r) {
      r.order = "torch-cuda-tree(lanes=1,affine=scale-bias)";
      r.cols = n;
    }).find("order 'torch-cuda-tree' is PyTorch's CUDA layer_norm tree and takes no parameters (got 'lanes=1,affine=scale-bias')") == 0);
  CHECK(error_of([](Request& r) {
    r.op = OpKind::softmax;
    r.order = "warp-butterfly";
    r.cols = 8193;
  }) == "order 'warp-butterfly' runs rows of N <= 8192 (a warp's shared memory), got N = 8193");
  auto attention = [](Request& r, const char* order, int64_t d) {
    r.op = OpKind::attention;
    r.order = order;
    r.cols = d;
    r.seq_q = r.seq_k = 256;
  };
  CHECK(error_of([&](Request& r) { attention(r, "flash-cuda", 128); }) == "(accepted)");
  CHECK(error_of([&](Request& r) { attention(r, "flash-cuda(bc=64)", 128); })
            .find("needs 81920 bytes of shared memory per block") != std::string::npos);
  CHECK(error_of([&](Request& r) { attention(r, "exact-tiled(threads=64)", 64); }).find("takes no parameters") != std::string::npos);
}

TEST_CASE("bad requests are rejected with a message naming the bad value") {
  CHECK(error_of([](Request&) {}) == "(accepted)");
  CHECK(error_of([](Request& r) { r.cols = 0; }) == "N (the last dim) must be at least 1, got 0");
  CHECK(error_of([](Request& r) { r.eps = -1e-5; }) == "eps must be finite and >= 0, got -1e-05");
  CHECK(error_of([](Request& r) { r.eps = NAN; }) == "eps must be finite and >= 0, got nan");
  CHECK(error_of([](Request& r) { r.order = "torch2.0"; }).find("unknown order 'torch2.0' for layer_norm; known: fast, ") == 0);
  CHECK(error_of([](Request& r) { r.op = OpKind::rms_norm; }).find("order 'torch1.13-cpu-avx2' is not defined for rms_norm") == 0);
  CHECK(error_of([](Request& r) { r.x_dtype = ScalarType::f16; r.weight_dtype = ScalarType::f16; }) ==
        "order 'torch1.13-cpu-avx2' is defined for x dtype f32, bf16 only, not f16");
  CHECK(error_of([](Request& r) { r.weight_dtype = ScalarType::bf16; }) ==
        "x is f32 but weight is bf16; mixed dtypes need --allow-mixed-dtypes (Request::allow_mixed_dtypes)");
  CHECK(error_of([](Request& r) { r.acc_dtype = ScalarType::f64; }) ==
        "order 'torch1.13-cpu-avx2' accumulates in f32; --acc f64 would be a different order");
  CHECK(error_of([](Request& r) { r.order = "torch1.13-cpu-avx2(lanes=16)"; }) ==
        "order 'torch1.13-cpu-avx2' reproduces a reference and takes no parameters (got 'lanes=16')");
  CHECK(error_of([](Request& r) { r.order = "lane-welford(lanes=3)"; }) == "order 'lane-welford(lanes=3)': lanes=3 must be a power of two");
  CHECK(error_of([](Request& r) { r.order = "lane-welford(chunk=0)"; }) == "order 'lane-welford(chunk=0)': chunk=0 outside [1, 64]");
  CHECK(error_of([](Request& r) { r.order = "lane-welford(speed=1)"; }).find("unknown parameter 'speed'") != std::string::npos);
  CHECK(error_of([](Request& r) { r.order = "lane-welford(lanes=8"; }) == "order 'lane-welford(lanes=8': missing ')'");
  CHECK(error_of([](Request& r) { r.acc_dtype = ScalarType::bf16; }) == "accumulation dtype bf16 is not f32 or f64");
  CHECK(error_of([](Request& r) { r.order = "two-pass-pairwise(block=8)"; }) ==
        "order 'two-pass-pairwise(block=8)': block 8 must be at least twice lanes (8)");
  // PyTorch's sum of 16-bit rows keeps 16-bit partial sums; the torch2.15 orders take f32 rows
  // (and mean, which PyTorch sums in f32, in every dtype).
  auto sum_of = [](OpKind op, ScalarType t) {
    return [op, t](Request& r) {
      r.op = op;
      r.x_dtype = t;
      r.has_weight = r.has_bias = false;
      r.order = "torch2.15-cpu-avx2(threads=2)";
    };
  };
  CHECK(error_of(sum_of(OpKind::sum, ScalarType::bf16)) ==
        "order 'torch2.15-cpu-avx2(threads=2)' has sum for x of f32 only, not bf16: PyTorch rounds the partial sums of a 16-bit "
        "sum to the 16-bit output type, which is not modelled (sum x.float(), or take mean, which PyTorch sums in f32)");
  CHECK(error_of(sum_of(OpKind::sum, ScalarType::f32)) == "(accepted)");
  CHECK(error_of(sum_of(OpKind::mean, ScalarType::f16)) == "(accepted)");
  // cross_entropy's own fields: on another op they are refused by name; N is fixed (the row ops'
  // forward take it at launch); PyTorch 1.13's orders have no backward.
  auto loss = [](OpKind op, const char* order) {
    return [op, order](Request& r) {
      r.op = op;
      r.order = order;
      r.has_weight = r.has_bias = false;
    };
  };
  CHECK(error_of(loss(OpKind::cross_entropy, "torch2.15-cpu-avx2")) == "(accepted)");
  CHECK(error_of([&](Request& r) {
    loss(OpKind::softmax, "fast")(r);
    r.reduction = LossReduction::sum;
  }) == "ignore_index and reduction are cross_entropy's; softmax takes neither (got ignore_index=-100, reduction=sum)");
  CHECK(error_of([&](Request& r) { r.ignore_index = 0; }) ==
        "ignore_index and reduction are cross_entropy's; layer_norm takes neither (got ignore_index=0, reduction=mean)");
  CHECK(error_of([&](Request& r) {
    loss(OpKind::cross_entropy, "fast")(r);
    r.cols = 0;
    r.cols_at_launch = true;
  }).find("cross_entropy: N at launch is for the row ops' forward") == 0);
  CHECK(error_of(loss(OpKind::cross_entropy_backward, "torch1.13-cpu-avx2"))
            .find("order 'torch1.13-cpu-avx2' is not defined for cross_entropy_backward") == 0);
  // The same request once valid and cached, then with a field of another op: refused, not served from the cache.
  CHECK(error_of(loss(OpKind::softmax, "fast")) == "(accepted)");
  CHECK(error_of([&](Request& r) {
    loss(OpKind::softmax, "fast")(r);
    r.ignore_index = 3;
  }) == "ignore_index and reduction are cross_entropy's; softmax takes neither (got ignore_index=3, reduction=mean)");
  CHECK(error_of([&](Request& r) {
    loss(OpKind::softmax, "fast")(r);
    r.causal = true;
  }) == "seq lengths, heads, kv_group, row strides, causal, scale, lse and mask are attention's; softmax takes none of them");
  CHECK(!parse_loss_reduction("avg"));
  CHECK(parse_loss_reduction("none") == LossReduction::none);
}

TEST_CASE("the elementwise ops' environment parameters: inner_loop and onednn_isa name their values") {
  const auto silu = [](std::string order, OpKind op = OpKind::silu) {
    return error_of([&](Request& r) {
      r.op = op;
      r.has_weight = r.has_bias = false;
      r.order = order;
    });
  };
  CHECK(silu("torch2.15-cpu-avx2(threads=2,inner_loop=row)") == "(accepted)");
  CHECK(silu("torch2.15-cpu-avx2(inner_loop=launch)") == "(accepted)");
  CHECK(silu("torch2.15-cpu-avx2(inner_loop=column)") == "order 'torch2.15-cpu-avx2(inner_loop=column)': inner_loop=column is not launch or row");
  CHECK(silu("torch2.15-cpu(onednn_isa=avx2)", OpKind::gelu) == "(accepted)");
  CHECK(silu("torch2.15-cpu(onednn_isa=sse41)", OpKind::gelu_backward) ==
        "order 'torch2.15-cpu(onednn_isa=sse41)': onednn_isa=sse41 is not avx512_core or avx2");
  CHECK(silu("fast(inner_loop=row)").find("order 'fast(inner_loop=row)': unknown parameter 'inner_loop'") == 0);
  CHECK(silu("torch2.15-cpu(inner_loop=row)", OpKind::gelu).find("order 'torch2.15-cpu(inner_loop=row)': gelu over rows of a strided input is "
                                                                   "ATen's erf kernel") == 0);
  CHECK(silu("torch2.15-cpu(inner_loop=row)", OpKind::gelu_backward).find("gelu_backward over rows of a strided input") != std::string::npos);
  CHECK(silu("torch2.15-cpu(inner_loop=launch)", OpKind::gelu) == "(accepted)");
}

TEST_CASE("mixed dtypes run when the request allows them") {
  Request r = ok();
  r.order = "fast";
  r.weight_dtype = ScalarType::bf16;
  r.allow_mixed_dtypes = true;
  KernelHandle k = compile(r);
  CHECK(k->args()[1].dtype == ScalarType::bf16);  // weight is read as bf16 directly
  CHECK(k->args()[0].dtype == ScalarType::f32);
}

TEST_CASE("run() checks buffer count, dtype and length before touching memory") {
  KernelHandle k = compile(ok());
  std::vector<float> x(3 * 128), w(128), b(128), y(3 * 128), m(3), s(3);
  std::vector<BufferRef> bufs = {{x.data(), 384, ScalarType::f32}, {w.data(), 128, ScalarType::f32},
                                 {b.data(), 128, ScalarType::f32}, {y.data(), 384, ScalarType::f32},
                                 {m.data(), 3, ScalarType::f32},   {s.data(), 3, ScalarType::f32}};
  CHECK_NOTHROW(k->run(bufs, 3));
  auto short_weight = bufs;
  short_weight[1].elements = 100;
  CHECK_THROWS_WITH_AS(k->run(short_weight, 3), "weight: 100 elements given, expected 128 (N with rows=3, N=128)", Error);
  auto wrong_type = bufs;
  wrong_type[0].dtype = ScalarType::f16;
  CHECK_THROWS_WITH_AS(k->run(wrong_type, 3), "x: dtype f16 given, kernel expects f32", Error);
  CHECK_THROWS_WITH_AS(k->run({bufs[0]}, 3), "layer_norm takes 6 buffers (x, weight, bias, y, mean, rstd), got 1", Error);
}

TEST_CASE("attention_backward: requests outside what its orders define are rejected") {
  auto backward = [](Request& r, const char* order) {
    r.op = OpKind::attention_backward;
    r.order = order;
    r.cols = 64;
    r.seq_q = r.seq_k = 40;
    r.has_weight = r.has_bias = false;
  };
  CHECK(error_of([&](Request& r) { backward(r, "flash"); }) == "(accepted)");
  CHECK(error_of([&](Request& r) {
    backward(r, "flash");
    r.lse_output = true;
  }).find("attention_backward writes dq, dk and dv; lse is one of its inputs") == 0);
  CHECK(error_of([&](Request& r) {
    backward(r, "fast");
    r.saved_stats = false;
    r.seq_q = (int64_t(1) << 18) + 1;
  }).find("attention_backward without lse keeps S_q = 262145 recomputed values per instance") == 0);
  CHECK(error_of([&](Request& r) {
    backward(r, "fast");
    r.heads = 0;
  }) == "attention heads H = 0 outside [1, 2^24]");
  CHECK(error_of([&](Request& r) {
    r.op = OpKind::softmax;
    r.cols = 64;
    r.heads = 4;
  }) == "seq lengths, heads, kv_group, row strides, causal, scale, lse and mask are attention's; softmax takes none of them");
  // An attention mask: PyTorch's CPU flash kernels (the torch2.15-cpu orders) and the flash orders
  // take it, f32 or the inputs' dtype, never with causal (SDPA refuses both) nor with S_k at launch.
  CHECK(error_of([&](Request& r) {
    backward(r, "torch2.15-cpu-avx2(mkl=amd)");
    r.heads = 4;
    r.mask = AttentionMask::parse("bf16:B1QK");
  }) == "attention: the mask's dtype bf16 is neither f32 nor the inputs' f32");
  CHECK(error_of([&](Request& r) {
    backward(r, "torch2.15-cpu-avx2(mkl=amd)");
    r.mask = AttentionMask::parse("f32:1HQK");
  }) == "(accepted)");
  CHECK(error_of([&](Request& r) {
    backward(r, "fast");
    r.mask = AttentionMask::parse("f32:B11K");
  }) == "(accepted)");
  CHECK(error_of([&](Request& r) {
    backward(r, "torch2.15-cpu-math-avx2(mkl=amd)");
    r.mask = AttentionMask::parse("f32:B11K");
  }).find("order 'torch2.15-cpu-math-avx2(mkl=amd)' has no attention mask for attention_backward; the torch2.15-cpu orders") == 0);
  CHECK(error_of([&](Request& r) {
    backward(r, "torch2.15-cpu-avx2(mkl=amd)");
    r.causal = true;
    r.mask = AttentionMask::parse("f32:11QK");
  }).find("attention: causal and a mask together") == 0);
  CHECK(error_of([&](Request& r) {
    r.op = OpKind::softmax;
    r.cols = 64;
    r.mask = AttentionMask::parse("f32:11QK");
  }) == "seq lengths, heads, kv_group, row strides, causal, scale, lse and mask are attention's; softmax takes none of them");
  CHECK(!AttentionMask::parse("f32:B1Q"));
  CHECK(!AttentionMask::parse("f32:BXQK"));
  CHECK(!AttentionMask::parse("i8:B1QK"));
  CHECK(AttentionMask::parse("bf16:1H1K")->text() == "bf16:1H1K");
  // Grouped-query attention: the group divides the heads, and only PyTorch's CPU flash backward takes it.
  CHECK(error_of([&](Request& r) {
    backward(r, "torch2.15-cpu-avx2(mkl=amd)");
    r.heads = 8;
    r.kv_group = 4;
  }) == "(accepted)");
  CHECK(error_of([&](Request& r) {
    backward(r, "torch2.15-cpu-avx2(mkl=amd)");
    r.heads = 6;
    r.kv_group = 4;
  }) == "attention: kv_group = 4 query heads per K/V head does not divide heads H = 6");
  CHECK(error_of([&](Request& r) {
    backward(r, "fast");
    r.heads = 4;
    r.kv_group = 2;
  }).find("order 'fast' has no grouped-query attention_backward (kv_group = 2); the torch2.15-cpu orders' attention_backward has") == 0);
  CHECK(error_of([&](Request& r) {
    backward(r, "torch2.15-cpu-avx2(mkl=amd)");
    r.op = OpKind::attention;
    r.heads = 4;
    r.kv_group = 2;
  }).find("order 'torch2.15-cpu-avx2(mkl=amd)' has no grouped-query attention (kv_group = 2)") == 0);
  CHECK(error_of([&](Request& r) {
    backward(r, "fast");
    r.k_row_stride = r.cols - 8;
  }).find("attention: k's row stride") == 0);
  // PyTorch's composite copies strided operands (k^T too) before MKL sees them: not modelled.
  CHECK(error_of([&](Request& r) {
    backward(r, "torch2.15-cpu-math-avx512(mkl=intel)");
    r.q_row_stride = 2 * r.cols;
  }).find("order 'torch2.15-cpu-math-avx512(mkl=intel)' reproduces its library for q, k and v with rows D = ") == 0);
  CHECK(error_of([&](Request& r) {
    backward(r, "torch2.15-cpu-avx512(mkl=intel)");
    r.q_row_stride = r.k_row_stride = r.v_row_stride = 3 * r.cols;
  }) == "(accepted)");
  CHECK(error_of([&](Request& r) { backward(r, "torch2.15-cpu-avx512(mkl=intel,mkl_threads=two)"); }) ==
        "order 'torch2.15-cpu-avx512(mkl=intel,mkl_threads=two)': mkl_threads=two is not a positive integer");
  // PyTorch 2.15's CPU backward: measured in f32 and bf16 with an AMD host's MKL, from the saved lse.
  CHECK(error_of([&](Request& r) { backward(r, "torch2.15-cpu-avx512(mkl=amd,threads=2)"); }) == "(accepted)");
  // bf16: the host decides whether the large gradient products are oneDNN's, and which of its
  // kernels; onednn= names it, so these hold on every host.
  for (const char* order : {"torch2.15-cpu-avx512(mkl=amd,threads=2,onednn=on)", "torch2.15-cpu-avx2(onednn=off,mkl=amd)",
                            "torch2.15-cpu-avx512(mkl=intel,threads=2,onednn=emulated)"})
    for (int64_t d : {64, 24, 40}) {  // 24, 40: dsum ends in a partial vector of 2V bf16
      CAPTURE(order);
      CAPTURE(d);
      CHECK(error_of([&](Request& r) {
        backward(r, order);
        r.x_dtype = ScalarType::bf16;
        r.cols = d;
      }) == "(accepted)");
    }
  CHECK(error_of([&](Request& r) {
    backward(r, "torch2.15-cpu-avx2(mkl=amd,onednn=maybe)");
    r.x_dtype = ScalarType::bf16;
  }) == "order 'torch2.15-cpu-avx2(mkl=amd,onednn=maybe)': onednn=maybe is not on, off or emulated");
  // An Intel host with avx512_bf16: MKL's vdpbf16ps kernels, measured for the backward's products too.
  CHECK(error_of([&](Request& r) {
    backward(r, "torch2.15-cpu-avx512(mkl=intel-avx512bf16,threads=2)");
    r.x_dtype = ScalarType::bf16;
  }) == "(accepted)");
  CHECK(error_of([&](Request& r) { backward(r, "torch2.15-cpu-avx512(mkl=intel-avx512bf16)"); }) == "(accepted)");
  CHECK(error_of([&](Request& r) { backward(r, "torch2.15-cpu-avx512(mkl=intel-bf16)"); }) ==
        "order 'torch2.15-cpu-avx512(mkl=intel-bf16)': mkl=intel-bf16 is not intel, intel-avx512bf16 or amd");
  // An Intel host's MKL: f32, bf16 (by oneDNN's setting) and f16 (one without avx512_fp16) measured.
  CHECK(error_of([&](Request& r) { backward(r, "torch2.15-cpu-avx2(mkl=intel,threads=2)"); }) == "(accepted)");
  CHECK(error_of([&](Request& r) {
    backward(r, "torch2.15-cpu-avx2(mkl=intel,onednn=off)");
    r.x_dtype = ScalarType::f16;
  }) == "(accepted)");
  // f16: measured on a host without avx512_fp16, whose gradient products are all gemm_stub's.
  CHECK(error_of([&](Request& r) {
    backward(r, "torch2.15-cpu-default(mkl=amd,onednn=off)");
    r.x_dtype = ScalarType::f16;
  }) == "(accepted)");
  // f16 with avx512_fp16: oneDNN's brgemm (measured on an Intel host; onednn=on names it).
  CHECK(error_of([&](Request& r) {
    backward(r, "torch2.15-cpu-avx512(mkl=intel-avx512bf16,onednn=on,threads=2)");
    r.x_dtype = ScalarType::f16;
  }) == "(accepted)");
  CHECK(error_of([&](Request& r) {
    backward(r, "torch2.15-cpu-avx512(mkl=amd,onednn=emulated)");
    r.x_dtype = ScalarType::f16;
  }).find("order 'torch2.15-cpu-avx512(mkl=amd,onednn=emulated)': onednn=emulated names oneDNN's bf16 kernel; f16 gradient "
          "products without avx512_fp16 are gemm_stub's") == 0);
  CHECK(error_of([&](Request& r) {
    backward(r, "torch2.15-cpu-avx512(mkl=amd)");
    r.saved_stats = false;
  }).find("order 'torch2.15-cpu-avx512(mkl=amd)' reproduces PyTorch's backward, which reads the forward's saved logsumexp: give lse") == 0);
  CHECK(error_of([&](Request& r) { backward(r, "exact-tiled"); }).find("is not defined for attention_backward") != std::string::npos);
  // The eager composite in bf16 and f16: ATen's own products, where PyTorch's oneDNN check fails
  // (onednn=off names that host, so these hold on every host), forward and backward.
  for (ScalarType t : {ScalarType::bf16, ScalarType::f16})
    for (OpKind op : {OpKind::attention, OpKind::attention_backward}) {
      CAPTURE(name(t));
      CAPTURE(name(op));
      auto composite = [&](Request& r, const char* order) {
        backward(r, order);
        r.op = op;
        r.x_dtype = t;
        r.saved_stats = op == OpKind::attention_backward;
      };
      CHECK(error_of([&](Request& r) { composite(r, "torch2.15-cpu-math-avx2(onednn=off,threads=2)"); }) == "(accepted)");
      CHECK(error_of([&](Request& r) { composite(r, "torch2.15-cpu-math-default(onednn=off)"); }) == "(accepted)");
      // Under avx512 PyTorch runs the avx2 build's gemm_stub.
      CHECK(error_of([&](Request& r) { composite(r, "torch2.15-cpu-math-avx512(onednn=off)"); }) == "(accepted)");
      // oneDNN's kernels are modelled for the composite: with avx512_bf16 and the emulated one in bf16,
      // with avx512_fp16 in f16 (onednn=on names the dtype's own); f16 has no emulated kernel.
      const std::string on = error_of([&](Request& r) { composite(r, "torch2.15-cpu-math-avx2(onednn=on)"); });
      const std::string emulated = error_of([&](Request& r) { composite(r, "torch2.15-cpu-math-avx2(onednn=emulated,threads=2)"); });
      CHECK(on == "(accepted)");
      CHECK(error_of([&](Request& r) { composite(r, "torch2.15-cpu-math-avx512(onednn=on,threads=4)"); }) == "(accepted)");
      if (t == ScalarType::bf16) {
        CHECK(emulated == "(accepted)");
      } else {
        CHECK(emulated.find("order 'torch2.15-cpu-math-avx2(onednn=emulated,threads=2)' with f16 inputs: onednn=emulated names "
                            "oneDNN's bf16 kernel") == 0);
      }
    }
}

namespace {
// Runs a compiled kernel on `rows` rows of zeros; returns the error, or "(ran)".
std::string launch_error(const KernelHandle& k, int64_t rows) {
  std::vector<std::vector<char>> storage;
  std::vector<BufferRef> bufs;
  for (const ArgSpec& a : k->args()) {
    storage.emplace_back(static_cast<size_t>(a.elements(rows, k->request().cols) * size_bytes(a.dtype)));
    bufs.push_back({storage.back().data(), a.elements(rows, k->request().cols), a.dtype});
  }
  try {
    k->run(bufs, rows);
  } catch (const Error& e) {
    return e.what();
  }
  return "(ran)";
}
}  // namespace

TEST_CASE("torch2.15 attention: a launch whose MKL order is not measured is refused, and only that launch") {
  Request r;
  r.op = OpKind::attention;
  r.cols = 64;
  r.seq_q = 13;
  r.seq_k = 40;
  r.has_weight = r.has_bias = false;
  for (Target target : {Target::cpu, Target::interpreter, Target::cuda_emu}) {
    CAPTURE(ordo::name(target));
    r.target = target;
    // One (batch, head): PyTorch calls MKL on all its threads, whose splits are measured on 2.
    // Several: on an Intel host its loop's first thread runs MKL on all of them too, the others
    // on MKL's own count (mkl_threads); on an AMD host the loop's calls are one thread's.
    r.order = "torch2.15-cpu-avx512(mkl=intel,threads=4)";
    KernelHandle four = compile(r);
    CHECK(launch_error(four, 1).find("rows=1: one (batch, head) with torch on 4 threads: PyTorch then runs MKL on all of them") == 0);
    CHECK(launch_error(four, 2).find("rows=2: torch on 4 threads: PyTorch's parallel loop then runs MKL with 4 threads on its first "
                                     "thread and 2 (mkl_threads) on the others") == 0);
    r.order = "torch2.15-cpu-avx512(mkl=amd,threads=4)";
    KernelHandle amd_four = compile(r);
    CHECK(launch_error(amd_four, 1).find("rows=1: one (batch, head) with torch on 4 threads") == 0);
    CHECK(launch_error(amd_four, 2) == "(ran)");
    r.order = "torch2.15-cpu-avx512(mkl=intel,threads=2,mkl_threads=4)";
    KernelHandle mixed = compile(r);
    CHECK(launch_error(mixed, 1) == "(ran)");
    CHECK(launch_error(mixed, 3).find("rows=3: torch on 2 threads with MKL's own thread count mkl_threads=4") == 0);
    r.order = "torch2.15-cpu-avx512(mkl=intel,threads=1,mkl_threads=4)";
    CHECK(launch_error(compile(r), 3) == "(ran)");
    r.order = "torch2.15-cpu-avx512(mkl=intel,threads=2,mkl_threads=2)";
    CHECK(launch_error(compile(r), 1) == "(ran)");
    CHECK(launch_error(compile(r), 2) == "(ran)");
    // The backward's gradients are (B, S, H, D) to PyTorch: a launch is whole groups of heads.
    Request g = r;
    g.op = OpKind::attention_backward;
    g.heads = 3;
    KernelHandle three_heads = compile(g);
    CHECK(launch_error(three_heads, 4) == "rows=4: the kernel is generated for 3 heads, and a launch is batch*heads rows");
    CHECK(launch_error(three_heads, 6) == "(ran)");
    // bf16 with a block of 3 keys against 13 queries: the AMD host's 2-thread cut is not found.
    r.x_dtype = ScalarType::bf16;
    r.seq_k = 3;
    r.order = "torch2.15-cpu-avx512(mkl=amd,threads=2)";
    KernelHandle amd = compile(r);
    CHECK(launch_error(amd, 1).find("rows=1: one (batch, head) on 2 threads with a 16-bit block of 3 keys against 13 queries") == 0);
    CHECK(launch_error(amd, 3) == "(ran)");
    r.order = "torch2.15-cpu-avx512(mkl=amd)";
    CHECK(launch_error(compile(r), 1) == "(ran)");
    r.order = "torch2.15-cpu-avx512(mkl=intel,threads=2)";  // the Intel host's cut is measured
    CHECK(launch_error(compile(r), 1) == "(ran)");
    r.x_dtype = ScalarType::f32;
    r.seq_k = 40;
  }
}

TEST_CASE("the 16-bit composite on oneDNN's brgemm: a launch oneDNN may split over K on more than 4 threads is refused") {
  // dv = p^T @ dout over 2048 queries in one (batch, head): oneDNN's 'bwd_w' K split, whose choice
  // and grouping are measured on 2 to 4 threads (gen/libraries/bf16_out_gemm.hpp), in bf16 (avx512_bf16) and
  // f16 (avx512_fp16) alike; bf16 splits only a power-of-two K.
  Request r;
  r.op = OpKind::attention_backward;
  r.cols = 8;
  r.seq_q = 2048;
  r.seq_k = 8;
  r.saved_stats = true;
  r.has_weight = r.has_bias = false;
  for (ScalarType t : {ScalarType::bf16, ScalarType::f16})
    for (Target target : {Target::cpu, Target::interpreter}) {
      CAPTURE(name(t));
      CAPTURE(ordo::name(target));
      r.x_dtype = t;
      r.target = target;
      r.seq_q = 2048;
      r.order = "torch2.15-cpu-math-avx512(onednn=on,threads=5)";
      KernelHandle five = compile(r);
      CHECK(launch_error(five, 1).find(fmt::format("rows=1: one (batch, head) with torch on 5 threads: oneDNN may split the {} product of "
                                                   "8 x 2048 x 8 (M x K x N) over K on its threads",
                                                   name(t))) == 0);
      CHECK(launch_error(five, 2) == "(ran)");  // two (batch, head)s: no K split
      r.order = "torch2.15-cpu-math-avx512(onednn=on,threads=4)";
      CHECK(launch_error(compile(r), 1) == "(ran)");
      r.order = "torch2.15-cpu-math-avx512(onednn=on,threads=3)";
      CHECK(launch_error(compile(r), 1) == "(ran)");
      r.seq_q = 3000;  // f16 may split any K >= 2048, bf16 a power of two only
      r.order = "torch2.15-cpu-math-avx512(onednn=on,threads=5)";
      const std::string k3000 = launch_error(compile(r), 1);
      if (t == ScalarType::bf16) CHECK(k3000 == "(ran)");
      else CHECK(k3000.find("rows=1: one (batch, head) with torch on 5 threads: oneDNN may split the f16 product of 8 x 3000 x 8") == 0);
    }
}
