// Differential fuzzing of numerics: random requests and random inputs through the interpreter
// (the specification) and every backend built here: Target::cpu (the LLVM JIT) on every input,
// and Target::cuda_emu (the CUDA source, compiled by the host compiler) on one input in eight
// whose order has a CUDA lowering, since each of its kernels is a compiler run of about a
// second. Outputs must be bit-identical, every NaN equal to every NaN (ir/ir.hpp).
//
// The input drives, through FuzzedDataProvider:
//  * the request: op; x dtype (f32, bf16, f16); sometimes a different weight dtype (mixed); an
//    order from gen::named_orders() for that op, or a parameterized variant of a parameterized
//    order (lanes, chunk, fma, acc, round, affine, block, outer, accumulators); the accumulation
//    type; eps; rows in flight; N, around lane, chunk and block boundaries up to 16385;
//  * the launch: rows (more for small N, up to 40, so launch-dependent orders cross their
//    16-row vectors), threads, and cached or streaming stores;
//  * the inputs, row by row, from profiles: N(0, 1); a huge offset with tiny noise (1e30 plus
//    1e23); a tiny variance around an offset; subnormals; all equal; every special value
//    (±0, ±Inf, NaN, the smallest subnormal, the largest finite, values whose squares overflow
//    or underflow); and raw bit patterns taken from the input. Weight and bias get their own.
// A request the table rejects (resolve throws ordo::Error) ends the input: rejecting is
// fuzz_order_name's business. Anything else that throws, or any differing bit, is a failure,
// reported with the request, the output, the row and element, and both bit patterns.
#include <fuzzer/FuzzedDataProvider.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.hpp"
#include "fuzz_common.hpp"
#include "gen/gen.hpp"
#include "ir/float_bits.hpp"
#include "ordo/compare.hpp"
#include "ordo/ordo.hpp"

namespace {

using namespace ordo;

// The ops whose inputs this target knows how to fill (per-row inputs such as x and dy row by
// row, weight and bias over N, saved statistics one per row; attention's q, k, v as whole
// buffers). A new op joins here with its inputs.
constexpr OpKind kOps[] = {OpKind::layer_norm, OpKind::rms_norm, OpKind::var_mean, OpKind::softmax, OpKind::log_softmax,
                           OpKind::attention, OpKind::layer_norm_backward, OpKind::rms_norm_backward, OpKind::softmax_backward,
                           OpKind::log_softmax_backward, OpKind::attention_backward, OpKind::sum, OpKind::mean, OpKind::silu,
                           OpKind::silu_backward, OpKind::gelu_tanh,
                           OpKind::gelu_tanh_backward, OpKind::gelu, OpKind::gelu_backward, OpKind::cross_entropy,
                           OpKind::cross_entropy_backward};
constexpr int kLastOp = static_cast<int>(sizeof kOps / sizeof kOps[0]) - 1;
constexpr ScalarType kStorage[] = {ScalarType::f32, ScalarType::bf16, ScalarType::f16};
// N: lane (8, 16, 32), chunk (16 vectors of 8 or 16 lanes), pairwise block (128) and numpy's
// 8192-element chunk boundaries.
constexpr int64_t kCols[] = {1,   2,   3,   4,    5,    7,    8,    9,    15,   16,   17,   31,   32,   33,   63,   64,
                             65,  127, 128, 129,  255,  256,  257,  511,  512,  513,  1000, 1023, 1024, 1025, 2047, 2048,
                             2049, 4095, 4096, 4097, 8191, 8192, 8193, 16385};
constexpr double kEps[] = {1e-5, 0.0, 1e-12, 1e-6, 0.1, 1.0, 1e-45, 1e-300, 1e30};

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
double uniform(uint64_t& s) { return static_cast<double>(splitmix64(s) >> 11) * 0x1p-53; }  // [0, 1)
double normal(uint64_t& s) {
  const double u1 = uniform(s) + 0x1p-54, u2 = uniform(s);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// Specials: zeros of both signs, infinities, NaN, the smallest subnormal (f32), the largest
// finite f32, values whose squares overflow (1e20) or underflow (1e-25), the f16 and bf16
// extremes, and ordinary numbers between them.
constexpr float kSpecial[] = {0.0f,    -0.0f,   __builtin_inff(), -__builtin_inff(), __builtin_nanf(""), 0x1p-149f, -0x1p-149f,
                              3.4028235e38f, -3.4028235e38f, 1e20f, -1e20f, 1e-25f, 65504.0f, -65504.0f, 0x1p-24f, 3.3895314e38f,
                              1.0f, -1.0f, 0.5f, 1e30f, -1e30f};

// Writes element i of a buffer of t from a float value (RNE to 16-bit types) or raw bits.
void put_value(ScalarType t, uint8_t* data, int64_t i, float v) {
  if (t == ScalarType::f32) {
    std::memcpy(data + 4 * i, &v, 4);
  } else {
    const uint16_t h = t == ScalarType::bf16 ? f32_to_bf16_bits(v) : f32_to_f16_bits(v);
    std::memcpy(data + 2 * i, &h, 2);
  }
}

// Fills elements [begin, begin + n) of a buffer with one profile.
void fill(FuzzedDataProvider& in, ScalarType t, uint8_t* data, int64_t begin, int64_t n, double center, double spread) {
  uint64_t seed = in.ConsumeIntegral<uint64_t>();
  const int profile = in.ConsumeIntegralInRange(0, 8);
  const double offset = profile == 2 ? center + 1e4 * normal(seed) : center;
  for (int64_t i = begin; i < begin + n; ++i) {
    float v = 0;
    switch (profile) {
      case 0: v = static_cast<float>(offset + spread * normal(seed)); break;
      case 1: v = static_cast<float>(1e30 + 1e23 * normal(seed)); break;         // huge offset, tiny noise
      case 2: v = static_cast<float>(offset * (1.0 + 0x1p-22 * normal(seed))); break;  // tiny variance: a few ulps apart
      case 3: v = static_cast<float>(0x1p-140 * normal(seed)); break;            // subnormal (f32), zero in 16 bits
      case 4: v = static_cast<float>(offset); break;                             // all equal
      case 5: v = kSpecial[splitmix64(seed) % (sizeof kSpecial / sizeof kSpecial[0])]; break;
      case 6: {  // raw bits: every pattern of the type, NaN payloads included
        const uint64_t bits = splitmix64(seed);
        std::memcpy(data + i * size_bytes(t), &bits, static_cast<size_t>(size_bytes(t)));
        continue;
      }
      case 7:  // N(0, 1) with specials sprinkled in
        v = splitmix64(seed) % 8 == 0 ? kSpecial[splitmix64(seed) % (sizeof kSpecial / sizeof kSpecial[0])]
                                      : static_cast<float>(offset + spread * normal(seed));
        break;
      default: v = static_cast<float>(std::ldexp(normal(seed), static_cast<int>(splitmix64(seed) % 256) - 128)); break;  // any scale
    }
    put_value(t, data, i, v);
  }
}

// An order name for op and dtype: a table row, or a parameterized variant of one.
std::string order_name(FuzzedDataProvider& in, OpKind op, ScalarType dtype) {
  std::vector<const gen::NamedOrder*> rows;
  for (const gen::NamedOrder& n : gen::named_orders()) {
    bool op_ok = false, dtype_ok = false;
    for (OpKind o : n.ops) op_ok |= o == op;
    for (ScalarType t : n.dtypes) dtype_ok |= t == dtype;
    if (op_ok && dtype_ok && !n.device_only) rows.push_back(&n);  // device-only: nothing to run here
  }
  if (rows.empty()) return "fast";
  const gen::NamedOrder& n = *rows[in.ConsumeIntegralInRange<size_t>(0, rows.size() - 1)];
  std::string name(n.name);
  if (n.reproduces_reference || !in.ConsumeBool()) return name;
  if (op == OpKind::attention) {  // the flash parameters (gen/resolve.cpp, apply_parameters)
    std::vector<std::string> params;
    const int count = in.ConsumeIntegralInRange(1, 3);
    for (int i = 0; i < count; ++i) {
      switch (in.ConsumeIntegralInRange(0, 4)) {
        case 0: params.push_back(fmt::format("bc={}", in.ConsumeIntegralInRange(1, 80))); break;
        case 1: params.push_back(fmt::format("queries={}", in.ConsumeIntegralInRange(1, 16))); break;
        case 2: params.push_back(in.ConsumeBool() ? "fma=all" : "fma=none"); break;
        case 3: params.push_back(in.ConsumeBool() ? "exp2=on" : "exp2=off"); break;
        default: params.push_back(in.ConsumeBool() ? "scale=multiply" : "scale=divide"); break;
      }
    }
    std::string joined;
    for (const std::string& p : params) joined += (joined.empty() ? "" : ",") + p;
    return name + "(" + joined + ")";
  }
  // Parameters the table's rows take (gen/resolve.cpp, apply_parameters), each from its range.
  static constexpr const char* kFma[] = {"none", "update", "merge", "all"};
  static constexpr const char* kAffine[] = {"scale-bias", "center-scale", "center-divide"};
  std::vector<std::string> params;
  const int count = in.ConsumeIntegralInRange(1, 3);
  for (int i = 0; i < count; ++i) {
    switch (in.ConsumeIntegralInRange(0, 8)) {
      case 0: params.push_back(fmt::format("lanes={}", 1 << in.ConsumeIntegralInRange(0, 5))); break;
      case 1: params.push_back(fmt::format("chunk={}", in.ConsumeIntegralInRange(1, 64))); break;
      case 2: params.push_back(fmt::format("accumulators={}", in.ConsumeIntegralInRange(1, 8))); break;
      case 3: params.push_back(fmt::format("block={}", in.ConsumeIntegralInRange(8, 300))); break;
      case 4: params.push_back(fmt::format("outer={}", in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange(1, 5000))); break;
      case 5: params.push_back(std::string("fma=") + kFma[in.ConsumeIntegralInRange(0, 3)]); break;
      case 6: params.push_back(in.ConsumeBool() ? "acc=f32" : "acc=f64"); break;
      case 7: params.push_back(in.ConsumeBool() ? "round=each" : "round=final"); break;
      default:
        params.push_back(std::string("affine=") + kAffine[in.ConsumeIntegralInRange(0, 2)]);
        break;
    }
  }
  std::string joined;
  for (const std::string& p : params) joined += (joined.empty() ? "" : ",") + p;
  return name + "(" + joined + ")";
}

std::string hex_bits(ScalarType t, const std::vector<uint8_t>& b, int64_t i) {
  uint64_t bits = 0;
  std::memcpy(&bits, b.data() + i * size_bytes(t), static_cast<size_t>(size_bytes(t)));
  return fmt::format("0x{:0{}x} ({})", bits, 2 * size_bytes(t), value_at(t, b.data(), i));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Every kernel is compiled here, not read from a disk cache of earlier runs.
  ::setenv("ORDO_CACHE", "0", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  Request r;
  r.op = kOps[in.ConsumeIntegralInRange(0, kLastOp)];
  r.x_dtype = kStorage[in.ConsumeIntegralInRange(0, 2)];
  const OpKind forward = forward_of(r.op);
  const bool norm_with_weight = forward == OpKind::layer_norm || forward == OpKind::rms_norm;
  r.has_weight = norm_with_weight && in.ConsumeIntegralInRange(0, 3) != 0;
  r.has_bias = forward == OpKind::layer_norm && in.ConsumeIntegralInRange(0, 3) != 0;
  if (r.has_weight && in.ConsumeIntegralInRange(0, 7) == 0) {
    r.weight_dtype = kStorage[in.ConsumeIntegralInRange(0, 2)];
    r.allow_mixed_dtypes = true;
  }
  switch (in.ConsumeIntegralInRange(0, 5)) {
    case 0: r.acc_dtype = ScalarType::f32; break;
    case 1: r.acc_dtype = ScalarType::f64; break;
    default: break;  // the order's own
  }
  r.eps = kEps[in.ConsumeIntegralInRange<size_t>(0, sizeof kEps / sizeof kEps[0] - 1)];
  r.rows_in_flight = in.ConsumeIntegralInRange(0, 7) == 0 ? in.ConsumeIntegralInRange(1, 5) : 0;
  r.cols = in.ConsumeIntegralInRange(0, 3) == 0 ? in.ConsumeIntegralInRange<int64_t>(1, 600)
                                                 : kCols[in.ConsumeIntegralInRange<size_t>(0, sizeof kCols / sizeof kCols[0] - 1)];
  if (r.op == OpKind::rms_norm_backward) r.saved_stats = in.ConsumeBool();  // rstd given, or recomputed
  if (forward == OpKind::cross_entropy) {
    r.acc_dtype.reset();
    r.reduction = std::array{LossReduction::mean, LossReduction::sum, LossReduction::none}[in.ConsumeIntegralInRange(0, 2)];
    r.ignore_index = in.ConsumeBool() ? -100 : in.ConsumeIntegralInRange<int64_t>(-2, 3);
  }
  if (forward == OpKind::attention) {  // small heads: the interpreter runs S_q*S_k*D steps per head
    // 72 and 136: past 64 and not a multiple of it, where blocks of 64 dims leave a short one.
    static constexpr int64_t kHeadDims[] = {8, 16, 24, 32, 64, 72, 136};
    static constexpr double kScales[] = {0.1, 0.37, 2.0, 1e-3};
    r.acc_dtype.reset();
    r.cols = kHeadDims[in.ConsumeIntegralInRange<size_t>(0, sizeof kHeadDims / sizeof kHeadDims[0] - 1)];
    r.seq_q = in.ConsumeIntegralInRange<int64_t>(1, 20);
    r.seq_k = in.ConsumeIntegralInRange<int64_t>(1, 40);
    r.causal = in.ConsumeBool();
    if (r.op == OpKind::attention) r.lse_output = in.ConsumeBool();
    else r.saved_stats = in.ConsumeBool();  // attention_backward: lse given, or recomputed
    if (in.ConsumeIntegralInRange(0, 3) == 0) r.scale = kScales[in.ConsumeIntegralInRange(0, 3)];
  }
  r.order = order_name(in, r.op, r.x_dtype);
  // The interpreter is slow (and slower under ASan): long rows run one at a time.
  const int64_t rows = forward == OpKind::attention ? in.ConsumeIntegralInRange(1, 3)
                       : r.cols > 1100           ? 1
                       : r.cols <= 64 && in.ConsumeIntegralInRange(0, 3) == 0 ? in.ConsumeIntegralInRange(1, 40)
                                                                                : in.ConsumeIntegralInRange(1, 4);
  const int threads = in.ConsumeIntegralInRange(0, 2);
  const auto stores = in.ConsumeBool() ? CompiledKernel::Stores::streaming : CompiledKernel::Stores::cached;
  const bool try_emu = in.ConsumeIntegralInRange(0, 7) == 0;

  KernelHandle spec, cpu;
  try {
    (void)gen::resolve(r);
  } catch (const Error&) {
    return 0;  // rejected with a message: not this target's concern
  }
  // ORDO_FUZZ_TRACE=1 names every case on stderr before it runs (then again once compared).
  static const bool trace = std::getenv("ORDO_FUZZ_TRACE") != nullptr;
  if (trace) fmt::print(stderr, "running {} rows={}\n", r.key(), rows);
  try {
    Request ri = r;
    ri.target = Target::interpreter;
    spec = compile(ri);
    cpu = compile(r);
  } catch (const std::exception& e) {
    fuzz::broken(fmt::format("an accepted request does not compile: {}: {}", r.key(), e.what()));
  }

  // Inputs, row by row (x) and whole (weight, bias); outputs start as different garbage on the
  // two sides, so an element a backend forgets to write cannot agree by accident.
  HostBuffers a = make_buffers(*spec, rows, 1, 0, 1);
  for (size_t i = 0; i < a.args.size(); ++i) {
    const ArgSpec& arg = a.args[i];
    if (arg.output) {
      std::fill(a.bytes[i].begin(), a.bytes[i].end(), uint8_t{0x5a});
    } else if (forward == OpKind::attention) {  // q, k, v (out, dout, lse): whole buffers, one value profile each
      fill(in, arg.dtype, a.bytes[i].data(), 0, arg.elements(rows, r.cols), 0.0, 1.0);
    } else if (arg.extent == ArgExtent::rows_by_cols) {  // x, dy
      for (int64_t row = 0; row < rows; ++row) fill(in, arg.dtype, a.bytes[i].data(), row * r.cols, r.cols, 0.0, 1.0);
    } else if (arg.dtype == ScalarType::i64) {  // cross_entropy's targets: classes, ignored rows, and any int64 at all
      for (int64_t row = 0; row < rows; ++row) {
        const int64_t pick = in.ConsumeIntegralInRange(0, 5);
        const int64_t t = pick == 0   ? r.ignore_index
                          : pick == 1 ? in.ConsumeIntegral<int64_t>()
                          : pick == 2 ? (in.ConsumeBool() ? -1 : r.cols)
                                      : in.ConsumeIntegralInRange<int64_t>(0, r.cols - 1);
        std::memcpy(a.bytes[i].data() + 8 * row, &t, 8);
      }
    } else if (arg.extent == ArgExtent::rows) {  // a backward op's saved statistics (mean, rstd), a per-row dloss
      fill(in, arg.dtype, a.bytes[i].data(), 0, rows, arg.name == "rstd" ? 1.0 : 0.0, 1.0);
    } else if (arg.extent == ArgExtent::cols) {  // weight, bias
      fill(in, arg.dtype, a.bytes[i].data(), 0, r.cols, arg.name == "weight" ? 1.0 : 0.0, 0.5);
    } else {  // one value for the launch (cross_entropy_backward's dloss and total_weight)
      fill(in, arg.dtype, a.bytes[i].data(), 0, arg.elements(rows, r.cols), arg.name == "total_weight" ? 1.0 : 0.0, 1.0);
    }
  }
  HostBuffers b = a;
  for (size_t i = 0; i < b.args.size(); ++i)
    if (b.args[i].output) std::fill(b.bytes[i].begin(), b.bytes[i].end(), uint8_t{0xa5});

  try {
    spec->run(a.refs(rows, r.cols), rows, 1);
    cpu->run(b.refs(rows, r.cols), rows, threads, stores);
  } catch (const std::exception& e) {
    fuzz::broken(fmt::format("a launch failed: {}: {}", r.key(), e.what()));
  }
  // cuda-emu runs every order drawn here (device-only orders are not drawn).
  std::optional<HostBuffers> emu_out;
  if (try_emu) {
    Request re = r;
    re.target = Target::cuda_emu;
    re.rows_in_flight = 0;  // a CPU-backend choice; cuda-emu runs one thread per instance
    HostBuffers c = a;
    for (size_t i = 0; i < c.args.size(); ++i)
      if (c.args[i].output) std::fill(c.bytes[i].begin(), c.bytes[i].end(), uint8_t{0x3c});
    try {
      compile(re)->run(c.refs(rows, r.cols), rows, threads);
    } catch (const std::exception& e) {
      fuzz::broken(fmt::format("cuda-emu failed on an accepted request: {}: {}", re.key(), e.what()));
    }
    emu_out = std::move(c);
  }
  if (trace) fmt::print(stderr, "compared {} rows={} threads={}{}\n", r.key(), rows, threads, emu_out ? " (and cuda-emu)" : "");
  for (size_t i = 0; i < a.args.size(); ++i) {
    const ArgSpec& arg = a.args[i];
    if (!arg.output) continue;
    const int64_t n = static_cast<int64_t>(a.bytes[i].size()) / size_bytes(arg.dtype);
    for (int64_t e = 0; emu_out && e < n; ++e)
      if (!same_bits(arg.dtype, a.bytes[i].data(), emu_out->bytes[i].data(), e))
        fuzz::broken(fmt::format("interpreter and cuda-emu differ: {} rows={}\n  {}[{}]: interpreter {}, cuda-emu {}", r.key(), rows,
                                 arg.name, e, hex_bits(arg.dtype, a.bytes[i], e), hex_bits(arg.dtype, emu_out->bytes[i], e)));
    for (int64_t e = 0; e < n; ++e) {
      if (same_bits(arg.dtype, a.bytes[i].data(), b.bytes[i].data(), e)) continue;
      const int64_t per_row = arg.extent == ArgExtent::rows_by_cols ? r.cols : arg.extent == ArgExtent::rows_by_fixed ? arg.per_row : 1;
      fuzz::broken(fmt::format("interpreter and cpu differ: {} rows={}\n  {}[{}] (row {}, element {}): interpreter {}, cpu {}", r.key(),
                               rows, arg.name, e, e / per_row, e % per_row, hex_bits(arg.dtype, a.bytes[i], e),
                               hex_bits(arg.dtype, b.bytes[i], e)));
    }
  }
  return 0;
}
