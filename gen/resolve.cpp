// Resolving a request to its Order: the order's text taken apart once, its parameters, the
// library kernels a host runs (MKL's, oneDNN's) chosen once, and every check of the request
// against the order (shapes, lengths at launch, limits). The table it resolves against is
// gen/order_table.cpp's.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "gen/blocks/warp.hpp"
#include "gen/gen.hpp"
#include "gen/host.hpp"
#include "ir/error.hpp"

namespace ordo::gen {

using namespace ordo::ir;
using K = MomentsOrder::Kind;
using S = SumOrder::Kind;
using F = AffineOrder::Form;

namespace {

constexpr ScalarType f32 = ScalarType::f32, bf16 = ScalarType::bf16, f16 = ScalarType::f16, f64 = ScalarType::f64;

// An order as a request names it, taken apart once: "name", or "name(p,...)" whose parameters p are
// key=value (a bare p has an empty key: flash(64)).
struct OrderText {
  std::string_view text;  // the whole, for messages
  std::string_view base;  // the table's name
  bool has_params = false, closed = true;  // "(" present; and the text ends in ")"
  struct Param {
    std::string key, value, item;  // item: as written
  };
  std::vector<Param> params;

  // The value of parameter `key`, if given.
  const std::string* value(std::string_view key) const {
    for (const Param& p : params)
      if (p.key == key) return &p.value;
    return nullptr;
  }
  std::string_view inside() const {  // between the parentheses, for messages
    const size_t open = text.find('(');
    return text.substr(open + 1, text.size() - open - (closed ? 2 : 1));
  }
};

OrderText parse_order_text(std::string_view text) {
  OrderText t;
  t.text = text;
  const size_t open = text.find('(');
  t.base = text.substr(0, open);
  if (open == std::string_view::npos) return t;
  t.has_params = true;
  t.closed = text.back() == ')' && text.size() > open + 1;
  const std::string_view inside = t.inside();
  for (size_t pos = 0; pos < inside.size();) {
    const size_t comma = inside.find(',', pos);
    const std::string_view item = inside.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    pos = comma == std::string_view::npos ? inside.size() : comma + 1;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) t.params.push_back({"", std::string(item), std::string(item)});
    else t.params.push_back({std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)), std::string(item)});
  }
  return t;
}

// "name(key=value,...)": the parameters override fields of the table's Order.
void apply_parameters(Order& o, const OrderText& t) {
  const std::string_view order_name = t.text;
  for (size_t i = 0; i < t.params.size(); ++i) {
    // flash(64): a bare first parameter is the key block.
    const bool positional_block = t.params[i].key.empty() && t.base == "flash" && i == 0;
    if (t.params[i].key.empty() && !positional_block)
      throw Error(fmt::format("order '{}': parameter '{}' is not key=value", order_name, t.params[i].item));
    const std::string key = positional_block ? "bc" : t.params[i].key, value = t.params[i].value;
    auto integer = [&](int lo, int hi) {
      int v = 0;
      try {
        size_t used = 0;
        v = std::stoi(value, &used);
        if (used != value.size()) throw std::invalid_argument(value);
      } catch (const std::exception&) {
        throw Error(fmt::format("order '{}': {}={} is not an integer", order_name, key, value));
      }
      if (v < lo || v > hi) throw Error(fmt::format("order '{}': {}={} outside [{}, {}]", order_name, key, v, lo, hi));
      return v;
    };
    auto power_of_two = [&](int v) {
      if (v & (v - 1)) throw Error(fmt::format("order '{}': {}={} must be a power of two", order_name, key, v));
      return v;
    };
    if (key == "lanes") {
      int v = power_of_two(integer(1, 32));
      o.moments.lanes = o.moments.sum.lanes = o.row_sum.lanes = o.softmax.lanes = o.softmax_backward.sum.lanes = v;
    } else if (key == "chunk") {
      o.moments.chunk = integer(1, 64);
    } else if (key == "accumulators") {
      o.moments.sum.accumulators = o.row_sum.accumulators = o.softmax_backward.sum.accumulators = integer(1, 8);
    } else if (key == "outer") {
      o.moments.sum.outer_chunk = o.row_sum.outer_chunk = integer(0, 1 << 30);
    } else if (key == "block") {
      o.moments.sum.block = o.row_sum.block = integer(8, 1 << 20);
    } else if (key == "fma") {
      if (value != "none" && value != "update" && value != "merge" && value != "all")
        throw Error(fmt::format("order '{}': fma={} is not none, update, merge or all", order_name, value));
      o.moments.fma_update = value == "update" || value == "all";
      o.moments.fma_merge = value == "merge" || value == "all";
      o.moments.sum.fma = o.row_sum.fma = o.softmax_backward.sum.fma = o.softmax_backward.fma = value != "none";
      o.attention.dot_fma = value != "none";
      o.attention_backward.fma = value != "none";
    } else if (key == "bc") {
      o.attention.key_block = integer(1, 4096);
    } else if (key == "threads") {  // flash on CUDA: a block of this many threads, a query each
      o.attention.team = power_of_two(integer(32, 1024));
    } else if (key == "queries") {
      o.attention.query_lanes = o.attention_backward.lanes = integer(1, 32);
    } else if (key == "exp2") {
      if (value != "on" && value != "off") throw Error(fmt::format("order '{}': exp2={} is not on or off", order_name, value));
      o.attention.exp2 = value == "on";
    } else if (key == "scale") {
      if (value != "divide" && value != "multiply")
        throw Error(fmt::format("order '{}': scale={} is not divide or multiply", order_name, value));
      o.attention.scale_divides = value == "divide";
    } else if (key == "acc") {
      if (value != "f32" && value != "f64") throw Error(fmt::format("order '{}': acc={} is not f32 or f64", order_name, value));
      o.moments.acc = value == "f32" ? f32 : f64;
    } else if (key == "round") {  // where 16-bit storage rounds the statistics: after every op, or once at the outputs
      if (value != "each" && value != "final") throw Error(fmt::format("order '{}': round={} is not each or final", order_name, value));
      o.round_stats_to_storage = value == "each";
    } else if (key == "affine") {
      if (value == "scale-bias") o.affine.form = F::ScaleBias;
      else if (value == "center-scale") o.affine.form = F::CenterScale;
      else if (value == "center-divide") o.affine.form = F::CenterDivide;
      else throw Error(fmt::format("order '{}': affine={} is not scale-bias, center-scale or center-divide", order_name, value));
    } else {
      throw Error(fmt::format("order '{}': unknown parameter '{}' (lanes, chunk, accumulators, block, outer, fma, acc, round, "
                              "affine; attention: bc, queries, threads, exp2, scale)",
                              order_name, key));
    }
  }
  // A range of more than `block` terms splits at half rounded down to a multiple of `lanes`;
  // below 2*lanes that half is 0 and the split never ends.
  if (o.attention.exp2 && o.attention.scale_divides)
    throw Error(fmt::format("order '{}': exp2=on folds log2(e) into a multiplied scale; it needs scale=multiply", order_name));
  if (o.moments.sum.block < 2 * o.moments.sum.lanes)
    throw Error(fmt::format("order '{}': block {} must be at least twice lanes ({})", order_name, o.moments.sum.block,
                            o.moments.sum.lanes));
}

// The MKL host an order's mkl= parameter names: intel (AVX-512 without avx512_bf16),
// intel-avx512bf16, amd; empty for another value.
std::optional<GemmOrder::Kind> mkl_parameter(std::string_view value) {
  if (value == "intel") return GemmOrder::Kind::MklIntelAvx512;
  if (value == "intel-avx512bf16") return GemmOrder::Kind::MklIntelAvx512Bf16;
  if (value == "amd") return GemmOrder::Kind::MklAmd;
  return std::nullopt;
}

// The MKL model for PyTorch's CPU attention: the one the order names (mkl=...), else the running
// host's. MKL runs other kernels on other CPUs, so a host with no model has none. ordo models an
// Intel CPU with AVX-512, without avx512_bf16 or with it (whose gemm_bf16bf16f32 runs vdpbf16ps
// kernels), and any AMD CPU, where MKL runs its generic kernels (measured on one with AVX-512 and
// avx512_bf16, f32 and bf16; the same bits on one with AVX2 only). In f16 MKL converts to f32 on
// an Intel host and runs its sgemm kernels, with avx512_fp16 too (measured: the flash forward and
// the backward's MKL products give the same bits on a Xeon with avx512_fp16 as the model of one
// without, docs/research/torch2.15-attention-f16.md). Empty when none fits; `why` then says what
// the host lacks.
std::optional<GemmOrder::Kind> mkl_model(const OrderText& t, const HostModel& host, std::string* why = nullptr) {
  if (const std::string* value = t.value("mkl")) {
    const std::optional<GemmOrder::Kind> kind = mkl_parameter(*value);
    if (!kind) throw Error(fmt::format("order '{}': mkl={} is not intel, intel-avx512bf16 or amd", t.text, *value));
    return kind;
  }
  // MKL runs its generic kernels on any AMD CPU: the same bits with and without AVX-512.
  if (host.vendor == HostModel::Vendor::amd) return GemmOrder::Kind::MklAmd;
  if (host.avx512f && host.vendor == HostModel::Vendor::intel)
    return host.avx512_bf16 ? GemmOrder::Kind::MklIntelAvx512Bf16 : GemmOrder::Kind::MklIntelAvx512;
  if (why) *why = "is neither an AMD CPU nor an Intel CPU with AVX-512";
  return std::nullopt;
}

// Whether PyTorch's 16-bit attention gradients (AttentionBackwardOrder::onednn_16bit) go to
// oneDNN, and to which of its kernels: the one the order names (onednn=on, off or emulated), else
// the running host's. PyTorch hands a bf16 gemm to oneDNN when its check for bf16 support passes,
// which needs AVX-512 (or AVX-NE-CONVERT); ordo models oneDNN's avx512_bf16 kernel (vdpbf16ps
// pairs) and its gemm:jit:bf16, which emulates bf16 on AVX-512 without avx512_bf16. An f16 gemm
// goes to oneDNN on a CPU with avx512_fp16, whose brgemm ordo models (measured on a Xeon), or with
// AVX-NE-CONVERT (or AMX-FP16), whose kernel it does not; elsewhere to gemm_stub (measured on an
// AVX2 EPYC and on an AVX-512 Xeon without avx512_fp16).
// Empty where the host's kernel is not modelled, and `why` says so as a clause ("this host has
// ...", or the parameter that asked for it).
std::optional<AttentionBackwardOrder::OneDnn> onednn_16bit_model(const Request& r, const OrderText& t, const HostModel& host,
                                                                  std::string* why = nullptr) {
  using OneDnn = AttentionBackwardOrder::OneDnn;
  const bool f16_data = r.x_dtype == ScalarType::f16;
  if (const std::string* value = t.value("onednn")) {
    if (*value != "on" && *value != "off" && *value != "emulated")
      throw Error(fmt::format("order '{}': onednn={} is not on, off or emulated", t.text, *value));
    if (*value == "off") return OneDnn::Off;
    const bool on = *value == "on";
    if (!f16_data) return on ? OneDnn::Avx512Bf16 : OneDnn::Emulated;
    if (on) return OneDnn::Avx512Fp16;
    if (why) *why = "onednn=emulated names oneDNN's bf16 kernel; f16 gradient products without avx512_fp16 are gemm_stub's";
    return std::nullopt;
  }
  const bool ne_convert = host.avx_ne_convert;
  if (f16_data) {
    // PyTorch's oneDNN f16 check passes with avx512_fp16 or AVX-NE-CONVERT.
    if (host.avx512_fp16) return OneDnn::Avx512Fp16;
    if (!ne_convert) return OneDnn::Off;
    if (why) *why = "this host has AVX-NE-CONVERT without avx512_fp16, where PyTorch's f16 products are oneDNN's, whose kernel is not modelled";
    return std::nullopt;
  }
  if (host.avx512_bf16) return OneDnn::Avx512Bf16;
  if (host.avx512f) return OneDnn::Emulated;
  if (!ne_convert) return OneDnn::Off;
  if (why) *why = "this host has AVX-NE-CONVERT without AVX-512, where oneDNN's bf16 kernel for the attention gradients is not modelled";
  return std::nullopt;
}

bool reproduces_16bit_cpu_attention_backward(const Request& r, const Order& o) {
  return r.op == OpKind::attention_backward && r.x_dtype != ScalarType::f32 &&
         o.attention_backward.kind == AttentionBackwardOrder::Kind::CpuFlash;
}

// Whether the request runs PyTorch's eager composite attention (forward or backward) on 16-bit
// inputs, whose products are ATen's stub or oneDNN's.
bool composite_16bit(const Request& r, const Order& o) {
  if (r.x_dtype == ScalarType::f32) return false;
  if (r.op == OpKind::attention) return o.attention.kind == AttentionOrder::Kind::CpuMatmul;
  return r.op == OpKind::attention_backward && o.attention_backward.kind == AttentionBackwardOrder::Kind::CpuMatmul;
}

// Whether the order runs PyTorch's CPU attention, forward or backward, whose products are MKL's.
bool calls_mkl(const Request& r, const Order& o) {
  using A = AttentionOrder::Kind;
  using B = AttentionBackwardOrder::Kind;
  // The 16-bit composite's bmm never reaches MKL (ATen's own kernels, or oneDNN).
  if (composite_16bit(r, o)) return false;
  if (r.op == OpKind::attention) return o.attention.kind == A::CpuFlash || o.attention.kind == A::CpuMatmul;
  if (r.op == OpKind::attention_backward) return o.attention_backward.kind == B::CpuFlash || o.attention_backward.kind == B::CpuMatmul;
  return false;
}

// Why the 16-bit composite cannot be reproduced here, or empty: its products are modelled as ATen's
// gemm_stub (the avx2 build's under avx512 too) where PyTorch's oneDNN check fails (bf16: a CPU
// without AVX-512 or AVX-NE-CONVERT; f16: without avx512_fp16 or AVX-NE-CONVERT; or onednn=off,
// the parameter of onednn_16bit_model), in bf16 as oneDNN's emulated kernel where the check
// passes on AVX-512 without avx512_bf16 (onednn=emulated), and as its brgemm and gemv kernels on
// a CPU with avx512_bf16 (onednn=on), in f16 as those kernels on a CPU with avx512_fp16 (onednn=on).
// Refused: AVX-NE-CONVERT without the AVX-512 extension (f16: avx512_fp16; bf16: AVX-512).
std::string composite_16bit_error(const Request& r, const OrderText& t, const HostModel& host) {
  std::string why;
  const std::optional<AttentionBackwardOrder::OneDnn> onednn = onednn_16bit_model(r, t, host, &why);
  if (onednn == AttentionBackwardOrder::OneDnn::Off || onednn == AttentionBackwardOrder::OneDnn::Emulated ||
      (onednn == AttentionBackwardOrder::OneDnn::Avx512Bf16 && r.x_dtype == ScalarType::bf16) ||
      (onednn == AttentionBackwardOrder::OneDnn::Avx512Fp16 && r.x_dtype == ScalarType::f16))
    return {};
  if (!onednn)
    return fmt::format("order '{}' with {} inputs: {}; '{}(onednn=off)' gives the bits of a CPU where PyTorch's oneDNN check fails, "
                       "and every product is ATen's own",
                       r.order, name(r.x_dtype), why, t.base);
  throw Error(fmt::format("internal: order '{}' with {} inputs takes no oneDNN kernel of its type", r.order, name(r.x_dtype)));
}

GemmOrder::Kind mkl_host_model(const Request& r, const OrderText& t, const HostModel& host) {
  std::string why;
  if (std::optional<GemmOrder::Kind> kind = mkl_model(t, host, &why)) return *kind;
  const std::string_view base = t.base;
  throw Error(fmt::format("order '{}': this host {}; PyTorch's attention calls MKL, and ordo models the MKL kernels of an Intel "
                          "AVX-512 host (with or without avx512_bf16) and of an AMD host only. "
                          "'{}(mkl=intel)', '{}(mkl=intel-avx512bf16)' or '{}(mkl=amd)' gives that host's bits",
                          r.order, why, base, base, base));
}

// The parameters of an order that reproduces PyTorch 2.15 (NamedOrder::takes_environment): not
// the order itself but the environment torch ran in. threads: torch.get_num_threads(), which
// changes a single long row's sum and attention's MKL calls; mkl_threads: MKL's own count. mkl
// (the host whose MKL kernels ran) and onednn (where the 16-bit attention gradients went) are the
// host models' (mkl_model, onednn_16bit_model), which read them for the ops that call those
// libraries; here they are only checked. Ops that depend on none of them ignore them.
void apply_environment(Order& o, const OrderText& t) {
  const std::string_view order_name = t.text;
  for (const OrderText::Param& p : t.params) {
    if (p.key.empty()) throw Error(fmt::format("order '{}': parameter '{}' is not key=value", order_name, p.item));
    const std::string &key = p.key, &value = p.value;
    // A count: a positive integer, named with its key when it is not one.
    auto positive = [&] {
      int v = 0;
      size_t used = 0;
      try {
        v = std::stoi(value, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != value.size() || value.empty() || v < 1)
        throw Error(fmt::format("order '{}': {}={} is not a positive integer", order_name, key, value));
      return v;
    };
    if (key == "threads") {
      const int v = positive();
      // MKL's splits were measured with 2 threads: on more, a launch whose products MKL would
      // split is refused (gen/libraries/mkl_gemm.cpp, mkl_threading).
      o.threads = o.attention.gemm.threads = o.attention_backward.gemm.threads = v;
      // Inductor's kernels split a row between threads by their own rule (SumOrder::parts,
      // MomentsOrder::parts), not by PyTorch eager's `threads`.
      for (SumOrder* sum : {&o.row_sum, &o.softmax.sum, &o.moments.sum})
        if (sum->kind == S::ChunkStack) sum->parts = v;
      if (o.moments.kind == K::VectorWelford) o.moments.parts = v;
      if (o.norm_backward.columns.kind == ColumnSumOrder::Kind::ThreadSlots || o.norm_backward.columns.kind == ColumnSumOrder::Kind::LevelCascade)
        o.norm_backward.columns.slots = v;
    } else if (key == "mkl_threads") {
      o.attention.gemm.mkl_threads = o.attention_backward.gemm.mkl_threads = positive();
    } else if (key == "mkl") {
      if (!mkl_parameter(value)) throw Error(fmt::format("order '{}': mkl={} is not intel, intel-avx512bf16 or amd", order_name, value));
    } else if (key == "onednn") {
      if (value != "on" && value != "off" && value != "emulated")
        throw Error(fmt::format("order '{}': onednn={} is not on, off or emulated", order_name, value));
    } else if (key == "inner_loop") {
      // PyTorch's elementwise loop over a strided input whose rows it cannot coalesce runs row by
      // row, each with its own scalar tail (silu, gelu_tanh and their backward ops).
      if (value == "launch") o.pointwise.tail_per_row = false;
      else if (value == "row") o.pointwise.tail_per_row = true;
      else throw Error(fmt::format("order '{}': inner_loop={} is not launch or row", order_name, value));
    } else if (key == "onednn_isa") {
      // oneDNN's own ISA (ONEDNN_MAX_CPU_ISA, or the CPU's best): its gelu_erf forward differs.
      if (value == "avx512_core") o.pointwise.gelu_erf = PointwiseOrder::GeluErf::OneDnnMinimax;
      else if (value == "avx2") o.pointwise.gelu_erf = PointwiseOrder::GeluErf::OneDnnAbramowitzStegun;
      else throw Error(fmt::format("order '{}': onednn_isa={} is not avx512_core or avx2", order_name, value));
    } else {
      throw Error(fmt::format("order '{}' reproduces PyTorch; its parameters are the environment torch ran in: "
                              "threads (torch.get_num_threads()), mkl (intel, intel-avx512bf16 or amd), mkl_threads (MKL's own thread count: "
                              "MKL_NUM_THREADS, else the host's physical cores) and onednn (whether its 16-bit attention "
                              "products went to oneDNN: on, with avx512_bf16; emulated, AVX-512 without avx512_bf16; off) and onednn_isa (the ISA "
                              "oneDNN ran gelu's code for: avx512_core or avx2) and inner_loop (launch, or row: torch's elementwise loop "
                              "ran row by row over a strided input), "
                              "not '{}'",
                              order_name, key));
    }
  }
}

std::string known_orders(OpKind op) {
  std::string s;
  for (const NamedOrder& n : named_orders())
    for (OpKind o : n.ops)
      if (o == op) s += (s.empty() ? "" : ", ") + std::string(n.name);
  return s;
}

// The shapes an order is defined for, beyond the op's own limits: an order that reproduces one
// kernel of a library takes the shapes that kernel runs. Empty when `r` is one of them.
std::string shape_error(const Request& r, const Order& o, const NamedOrder& n, const OrderText& text, const HostModel& host) {
  // Row strides other than D reach a library's kernels only through PyTorch's flash kernels
  // (Request::q_row_stride); its composites copy strided operands first, k^T among them, which
  // changes the product MKL sees. Orders that reproduce no library are the same on any layout.
  const bool strided = (r.q_row_stride && r.q_row_stride != r.cols) || (r.k_row_stride && r.k_row_stride != r.cols) ||
                       (r.v_row_stride && r.v_row_stride != r.cols);
  const bool flash = (r.op == OpKind::attention && o.attention.kind == AttentionOrder::Kind::CpuFlash) ||
                     (r.op == OpKind::attention_backward && o.attention_backward.kind == AttentionBackwardOrder::Kind::CpuFlash);
  // Grouped-query attention's backward: PyTorch's CPU flash kernel sums a K/V head's gradients
  // over its group's query heads in one chain, which only that order models; the forward's query
  // heads are independent, so a caller gives it K/V expanded to one head per query head.
  if (r.kv_group != 1 && !(r.op == OpKind::attention_backward && o.attention_backward.kind == AttentionBackwardOrder::Kind::CpuFlash))
    return fmt::format("order '{}' has no grouped-query {} (kv_group = {}); the torch2.15-cpu orders' attention_backward has: "
                       "otherwise expand k and v to one head per query head{}",
                       r.order, name(r.op), r.kv_group, r.op == OpKind::attention_backward ? " and sum dk and dv over each group" : "");
  // PyTorch's CPU flash kernels add the mask in their own way (fma(q.k, scale, mask), and after
  // the product's alpha = scale in the backward); the flash orders add it to the finished score.
  // The composites and the 1.13 orders have none.
  const bool tiled = (r.op == OpKind::attention && o.attention.kind == AttentionOrder::Kind::Flash) ||
                     (r.op == OpKind::attention_backward && o.attention_backward.kind == AttentionBackwardOrder::Kind::Tiled);
  if (r.mask && !flash && !tiled)
    return fmt::format("order '{}' has no attention mask for {}; the torch2.15-cpu orders (PyTorch's CPU flash kernels) and the flash "
                       "orders (fast, flash) have one",
                       r.order, name(r.op));
  if (strided && n.reproduces_reference && !flash)
    return fmt::format("order '{}' reproduces its library for q, k and v with rows D = {} apart; with other row strides ({}, {}, {}) "
                       "PyTorch's composite copies them first, which is not modelled",
                       r.order, r.cols, r.q_row_stride, r.k_row_stride, r.v_row_stride);
  if (const std::vector<ScalarType>& have = dtypes_for(n, r.op);
      std::find(have.begin(), have.end(), r.x_dtype) == have.end()) {
    std::vector<std::string_view> names;
    for (ScalarType t : have) names.push_back(name(t));
    std::string_view why;
    for (const OpDtypes& d : n.fewer_dtypes)
      if (d.op == r.op) why = d.why;
    return fmt::format("order '{}' has {} for x of {} only, not {}: {}", r.order, name(r.op), fmt::join(names, ", "),
                       name(r.x_dtype), why);
  }
  if (r.op == OpKind::attention_backward && o.attention_backward.kind == AttentionBackwardOrder::Kind::CpuFlash) {
    if (!r.saved_stats)
      return fmt::format("order '{}' reproduces PyTorch's backward, which reads the forward's saved logsumexp: give lse", r.order);
  }
  if (composite_16bit(r, o)) {
    if (std::string why = composite_16bit_error(r, text, host); !why.empty()) return why;
    // P and its gradient (backward) or 32 rows of scores (forward), 16-bit, per instance.
    // The backward with oneDNN's products also keeps dk^T (D x S_k), whose rows oneDNN sums.
    const bool dk_t = r.op == OpKind::attention_backward && o.attention_backward.onednn_16bit == AttentionBackwardOrder::OneDnn::Emulated;
    const int64_t scratch_bytes =
        ((r.op == OpKind::attention ? std::min<int64_t>(r.seq_q, 32) : 2 * r.seq_q) * r.seq_k + (dk_t ? r.cols * r.seq_k : 0)) * 2;
    if (r.op == OpKind::attention && r.lse_output)
      return fmt::format("order '{}' is a composite of matmul and softmax, which makes no log-sum-exp", r.order);
    if (scratch_bytes > (int64_t(2) << 20))
      return fmt::format("order '{}' keeps {} per instance: {} bytes, over 2 MiB of stack (S_q = {}, S_k = {})", r.order,
                         r.op == OpKind::attention ? "32 rows of scores" : dk_t ? "P, its gradient and dk^T (2 x S_q x S_k + D x S_k)" : "P and its gradient (2 x S_q x S_k)", scratch_bytes,
                         r.seq_q, r.seq_k);
    return {};
  }
  if (r.op == OpKind::attention_backward && o.attention_backward.kind == AttentionBackwardOrder::Kind::CpuMatmul) {
    // The AMD model peels each row of C to a 16-byte boundary; q^T @ grad has rows of S_k floats.
    if (o.attention_backward.gemm.kind == GemmOrder::Kind::MklAmd && r.seq_q * r.seq_k * r.cols >= 400 &&
        (r.cols % 4 != 0 || r.seq_k % 4 != 0))
      return fmt::format("order '{}' with an AMD host's MKL takes D and S_k multiples of 4 (rows of its products' outputs start at "
                         "16-byte boundaries only then, and the kernels peel by them), got D = {}, S_k = {}",
                         r.order, r.cols, r.seq_k);
    const int64_t scratch_bytes = (2 * r.seq_q * r.seq_k + r.cols * r.seq_k) * 4;
    if (scratch_bytes > (int64_t(2) << 20))
      return fmt::format("order '{}' keeps P and its gradient (2 x S_q x S_k floats) and q^T @ grad (D x S_k) per instance: {} bytes, "
                         "over 2 MiB of stack (S_q = {}, S_k = {}, D = {})",
                         r.order, scratch_bytes, r.seq_q, r.seq_k, r.cols);
  }
  const bool cpu_blas = r.op == OpKind::attention &&
                        (o.attention.kind == AttentionOrder::Kind::CpuFlash || o.attention.kind == AttentionOrder::Kind::CpuMatmul);
  if (cpu_blas && o.attention.gemm.kind == GemmOrder::Kind::MklAmd && r.cols % 4 != 0)
    return fmt::format("order '{}' with an AMD host's MKL: its gemv and small-matrix kernels peel each row up to a 16-byte boundary, "
                       "and with D = {} (not a multiple of 4) rows start at alignments that change from row to row, block to block "
                       "and (batch, head) to (batch, head); ordo's model takes D a multiple of 4",
                       r.order, r.cols);
  if (r.op == OpKind::attention && o.attention.kind == AttentionOrder::Kind::CpuMatmul) {
    if (r.lse_output) return fmt::format("order '{}' is a composite of matmul and softmax, which makes no log-sum-exp", r.order);
    // Rows of scores in scratch: 32 (or S_q when fewer, or when MKL's kernel takes the whole product) x S_k.
    const int64_t rows = r.seq_q <= 32 ? r.seq_q : 32;
    if (rows * r.seq_k * 4 > (int64_t(2) << 20))
      return fmt::format("order '{}' keeps {} x S_k = {} scores per instance, over 2 MiB of stack; S_k up to {} fits", r.order, rows,
                         r.seq_k, (int64_t(2) << 20) / 4 / rows);
  }
  if ((r.op == OpKind::softmax || r.op == OpKind::log_softmax) && o.softmax.kind == SoftmaxOrder::Kind::WarpButterfly) {
    // torch-cuda: PyTorch's persistent warp kernel runs N <= 1024 only. warp-butterfly keeps a
    // row's exponentials in 32 * I floats of shared memory: N <= 8192 is 32 KiB.
    const int64_t limit = n.device_only ? 1024 : 8192;
    if (r.cols > limit)
      return fmt::format("order '{}' runs rows of N <= {} ({}), got N = {}", r.order, limit,
                         n.device_only ? "PyTorch's persistent warp softmax; longer rows take its block kernel" : "a warp's shared memory",
                         r.cols);
  }
  return {};
}

}  // namespace

bool takes_shape(const Request& r, const HostModel& host) {
  try {
    (void)resolve(r, host);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Attention's own fields: shapes and scale. Checked before any order is built.
void check_attention_request(const Request& r) {
  if (forward_of(r.op) != OpKind::attention) {
    if (r.seq_q || r.seq_k || r.seq_k_at_launch || r.causal || r.scale || r.lse_output || r.heads != 1 || r.kv_group != 1 ||
        r.q_row_stride || r.k_row_stride || r.v_row_stride || r.mask)
      throw Error(fmt::format("seq lengths, heads, kv_group, row strides, causal, scale, lse and mask are attention's; {} takes none of them",
                              name(r.op)));
    return;
  }
  if (r.heads < 1 || r.heads > (int64_t(1) << 24)) throw Error(fmt::format("attention heads H = {} outside [1, 2^24]", r.heads));
  if (r.kv_group < 1 || r.kv_group > r.heads || r.heads % r.kv_group)
    throw Error(fmt::format("attention: kv_group = {} query heads per K/V head does not divide heads H = {}", r.kv_group, r.heads));
  for (auto [name, stride] : {std::pair{"q", r.q_row_stride}, {"k", r.k_row_stride}, {"v", r.v_row_stride}})
    if (stride != 0 && (stride < r.cols || stride > (int64_t(1) << 40)))
      throw Error(fmt::format("attention: {}'s row stride {} is neither 0 (contiguous) nor in [D = {}, 2^40]", name, stride, r.cols));
  if (r.mask) {
    if (r.mask->dtype != ScalarType::f32 && r.mask->dtype != r.x_dtype)
      throw Error(fmt::format("attention: the mask's dtype {} is neither f32 nor the inputs' {}", name(r.mask->dtype), name(r.x_dtype)));
    if (r.causal) throw Error("attention: causal and a mask together (PyTorch's SDPA refuses both; put the causal part into the mask)");
  }
  if (r.cols < 8 || r.cols > 512 || r.cols % 8)
    throw Error(fmt::format("attention head dim D = {} must be a multiple of 8 in [8, 512] (32, 64, 128, 256 are the tested ones)", r.cols));
  if (r.seq_q < 1 || r.seq_q > (int64_t(1) << 24)) throw Error(fmt::format("attention query length S_q = {} outside [1, 2^24]", r.seq_q));
  if (r.seq_k_at_launch) {
    if (r.seq_k != 0) throw Error(fmt::format("attention: S_k is given at launch, so seq_k must be 0, got {}", r.seq_k));
    if (r.op == OpKind::attention_backward && !r.saved_stats)
      throw Error("attention_backward with S_k at launch takes the forward's lse (saved_stats); without it, give seq_k");
  } else if (r.seq_k < 1 || r.seq_k > (int64_t(1) << 24)) {
    throw Error(fmt::format("attention key length S_k = {} outside [1, 2^24]", r.seq_k));
  }
  if (r.scale && !(std::isfinite(*r.scale) && *r.scale > 0))
    throw Error(fmt::format("attention scale must be finite and > 0, got {}", *r.scale));
  if (r.acc_dtype && *r.acc_dtype != f32) throw Error(fmt::format("attention accumulates in f32; --acc {} is not supported", name(*r.acc_dtype)));
  if (r.op == OpKind::attention_backward && r.lse_output)
    throw Error("attention_backward writes dq, dk and dv; lse is one of its inputs (Request::saved_stats), not an output");
  // Recomputing lse keeps every query's in an instance's scratch (stage 1).
  if (r.op == OpKind::attention_backward && !r.saved_stats && r.seq_q > (int64_t(1) << 18))
    throw Error(fmt::format("attention_backward without lse keeps S_q = {} recomputed values per instance, over 1 MiB; give lse (S_q up to "
                            "{} without it)",
                            r.seq_q, int64_t(1) << 18));
}

namespace {

// A reduction whose loops gen/ can build for a length given at launch: a sequential sum, a lane
// tree or PyTorch's level cascade, without outer chunks (gen/blocks/reductions.cpp, *_at_launch).
std::string sum_at_launch_error(const SumOrder& s) {
  if (s.kind != S::Sequential && s.kind != S::LaneTree && s.kind != S::LevelCascade)
    return fmt::format("its sum ({}) has blocks fixed by N", describe(s));
  if (s.outer_chunk > 0) return fmt::format("its sum is cut into chunks of {}", s.outer_chunk);
  if (s.tail_unfused_group > 0) return fmt::format("its tail splits into groups of {} by N", s.tail_unfused_group);
  return {};
}

// Why the resolved order `o` cannot take N at launch for r's op ("" when it can): every reduction
// must be one of the loops above.
std::string cols_at_launch_error(const Request& r, const Order& o) {
  switch (r.op) {
    case OpKind::layer_norm:
    case OpKind::var_mean:
      // PyTorch's cascade, its chunks and carries counted from N; one Welford stream in element order.
      if (o.moments.kind == K::LaneWelford || o.moments.kind == K::SequentialWelford) return {};
      if (o.moments.kind != K::TwoPass) return fmt::format("its moments ({}) are laid out for one N", describe(o.moments));
      if (std::string why = sum_at_launch_error(o.moments.sum); !why.empty()) return why;
      return sum_at_launch_error(o.moments.dev_sum.value_or(o.moments.sum));
    case OpKind::rms_norm:
    case OpKind::sum:
    case OpKind::mean:
      // PyTorch's split of a long row between its threads (gen/ops/rms_norm.cpp) is computed from N at launch.
      return sum_at_launch_error(o.row_sum);
    case OpKind::silu:
    case OpKind::gelu_tanh: return {};  // the chunks and tails are computed from the launch's elements
    case OpKind::gelu: return {};       // every element alike
    case OpKind::softmax:
    case OpKind::log_softmax:
      if (o.softmax.kind != SoftmaxOrder::Kind::TwoPass && o.softmax.kind != SoftmaxOrder::Kind::Staged)
        return fmt::format("its reductions ({}) are laid out for one N", describe(o.softmax));
      return {};
    default: return fmt::format("{} is not a row op's forward", name(r.op));
  }
}

// The parts of an Order a row op's forward reads.
bool same_row_arithmetic(const Order& a, const Order& b) {
  return a.moments == b.moments && a.row_sum == b.row_sum && a.affine == b.affine && a.softmax == b.softmax && a.pointwise == b.pointwise &&
         a.round_stats_to_storage == b.round_stats_to_storage && a.threads == b.threads;
}

// N at launch (Request::cols_at_launch). The order is resolved for lengths on both sides of every
// boundary a named order's table tests (onnxruntime's N <= 7, PyTorch's vector widths, its grain
// of 32768) and must come out the same at each, with reductions whose loops gen/ builds for any N.
Order resolve_cols_at_launch(const Request& r, const HostModel& host) {
  if (r.op != OpKind::layer_norm && r.op != OpKind::rms_norm && r.op != OpKind::var_mean && r.op != OpKind::softmax &&
      r.op != OpKind::log_softmax && r.op != OpKind::sum && r.op != OpKind::mean && r.op != OpKind::silu && r.op != OpKind::gelu_tanh &&
      r.op != OpKind::gelu)
    throw Error(fmt::format("{}: N at launch is for the row ops' forward (layer_norm, rms_norm, var_mean, softmax, log_softmax, sum, mean, silu, "
                            "gelu_tanh, gelu)",
                            name(r.op)));
  if (r.cols != 0) throw Error(fmt::format("N is given at launch, so cols must be 0, got {}", r.cols));
  // A request the order refuses at N = 1 is a bad request whatever N is: its error as it stands.
  auto at = [&](int64_t n) {
    Request fixed = r;
    fixed.cols_at_launch = false;
    fixed.cols = n;
    return resolve(fixed, host);
  };
  const Order first = at(1);
  for (int64_t n : {int64_t(7), int64_t(8), int64_t(33), int64_t(1000), int64_t(32768), int64_t(32769), int64_t(1) << 24}) {
    Order o;
    try {
      o = at(n);
    } catch (const Error& e) {
      throw FixedLengthError(fmt::format("order '{}' builds its {} for one N; at N = {}: {}", r.order, name(r.op), n, e.what()));
    }
    if (!same_row_arithmetic(first, o))
      throw FixedLengthError(fmt::format("order '{}' builds its {} for one N (its arithmetic at N = {} is not that at N = 1); give N",
                                         r.order, name(r.op), n));
  }
  if (std::string why = cols_at_launch_error(r, first); !why.empty())
    throw FixedLengthError(fmt::format("order '{}' builds its {} for one N ({}); give N", r.order, name(r.op), why));
  return first;
}

}  // namespace

Order resolve(const Request& r, const HostModel& host) {
  if (r.cols_at_launch) return resolve_cols_at_launch(r, host);
  check_attention_request(r);
  if (forward_of(r.op) != OpKind::cross_entropy && (r.ignore_index != -100 || r.reduction != LossReduction::mean))
    throw Error(fmt::format("ignore_index and reduction are cross_entropy's; {} takes neither (got ignore_index={}, reduction={})", name(r.op),
                            r.ignore_index, name(r.reduction)));
  if (r.cols <= 0) throw Error(fmt::format("N (the last dim) must be at least 1, got {}", r.cols));
  if (r.cols > (int64_t(1) << 31)) throw Error(fmt::format("N = {} exceeds the supported 2^31 columns", r.cols));
  if (!(r.eps >= 0) || !std::isfinite(r.eps)) throw Error(fmt::format("eps must be finite and >= 0, got {}", r.eps));
  if (r.x_dtype != f32 && r.x_dtype != bf16 && r.x_dtype != f16)
    throw Error(fmt::format("x dtype {} is not a storage type (f32, bf16, f16)", name(r.x_dtype)));
  const ScalarType wt = r.weight_type();
  if (wt != f32 && wt != bf16 && wt != f16) throw Error(fmt::format("weight dtype {} is not a storage type (f32, bf16, f16)", name(wt)));
  if (wt != r.x_dtype && !r.allow_mixed_dtypes)
    throw Error(fmt::format("x is {} but weight is {}; mixed dtypes need --allow-mixed-dtypes (Request::allow_mixed_dtypes)",
                            name(r.x_dtype), name(wt)));
  if (r.op == OpKind::layer_norm_backward && !r.has_weight && r.has_bias && wt != r.x_dtype)
    throw Error(fmt::format("layer_norm_backward: x is {} but bias is {}; without a weight PyTorch takes no mixed dtypes, give the bias "
                            "x's dtype",
                            name(r.x_dtype), name(wt)));
  if (r.op == OpKind::rms_norm_backward && r.has_bias) throw Error("rms_norm_backward: rms_norm has no bias, so there is no dbias");
  if (r.rows_in_flight < 0 || r.rows_in_flight > 16)
    throw Error(fmt::format("rows in flight {} outside [0, 16]", r.rows_in_flight));
  if (r.target == Target::cuda && r.cuda_arch != 80 && r.cuda_arch != 86 && r.cuda_arch != 89 && r.cuda_arch != 90)
    throw Error(fmt::format("CUDA arch sm_{} is not supported; arch: sm_80, sm_86, sm_89, sm_90", r.cuda_arch));
  if (r.acc_dtype && *r.acc_dtype != f32 && *r.acc_dtype != f64)
    throw Error(fmt::format("accumulation dtype {} is not f32 or f64", name(*r.acc_dtype)));

  const OrderText text = parse_order_text(r.order);
  const NamedOrder* n = find_order(text.base);
  if (!n) throw Error(fmt::format("unknown order '{}' for {}; known: {}", r.order, name(r.op), known_orders(r.op)));
  bool op_ok = false;
  for (OpKind o : n->ops) op_ok |= o == r.op;
  if (!op_ok) throw Error(fmt::format("order '{}' is not defined for {}; known: {}", n->name, name(r.op), known_orders(r.op)));
  bool dtype_ok = false;
  for (ScalarType t : n->dtypes) dtype_ok |= t == r.x_dtype;
  if (!dtype_ok) {
    std::string list;
    for (ScalarType t : n->dtypes) list += (list.empty() ? "" : ", ") + std::string(name(t));
    throw Error(fmt::format("order '{}' is defined for x dtype {} only, not {}", n->name, list, name(r.x_dtype)));
  }
  // An order that pins its accumulation type makes its own; the others take the request's (f32 by default).
  Order o = n->make(r.x_dtype, n->pins_acc ? f32 : r.acc_dtype.value_or(f32), r, host);
  if (n->pins_acc && r.acc_dtype && *r.acc_dtype != o.moments.acc)
    throw Error(fmt::format("order '{}' accumulates in {}; --acc {} would be a different order", n->name, name(o.moments.acc),
                            name(*r.acc_dtype)));
  // The libraries' kernels, each chosen once: by the order's mkl= and onednn= where given, else by
  // the host's model. The backward's forward recomputes P with the same MKL (CpuMatmul).
  if (calls_mkl(r, o)) o.attention.gemm.kind = o.attention_backward.gemm.kind = mkl_host_model(r, text, host);
  o.attention.gemm.mkl_threads = o.attention_backward.gemm.mkl_threads = host.physical_cores;  // mkl_threads=N overrides
  o.attention.gemm.vector_chains = o.attention_backward.gemm.vector_chains = !cuda_target(r);
  o.attention.gemm.register_floats = o.attention_backward.gemm.register_floats = 16 / registers_per_vector(r, 16);
  if (reproduces_16bit_cpu_attention_backward(r, o)) {
    std::string why;
    std::optional<AttentionBackwardOrder::OneDnn> onednn = onednn_16bit_model(r, text, host, &why);
    if (!onednn)
      throw Error(fmt::format("order '{}': {}; '{}(onednn=off)' gives the bits of a host without it (every gradient "
                              "product by ATen's gemm_stub){}",
                              r.order, why, text.base,
                              r.x_dtype == ScalarType::f16 ? ""
                                                           : ", '(onednn=on)' those of a host whose oneDNN has avx512_bf16, "
                                                             "'(onednn=emulated)' those of an AVX-512 host without it"));
    o.attention_backward.onednn_16bit = *onednn;
  }
  // The composite's kernel choice (checked by shape_error, which refuses a host without a model).
  if (composite_16bit(r, o))
    o.attention_backward.onednn_16bit = onednn_16bit_model(r, text, host).value_or(AttentionBackwardOrder::OneDnn::Off);
  if (text.has_params && n->takes_environment) {
    if (!text.closed) throw Error(fmt::format("order '{}': missing ')'", r.order));
    apply_environment(o, text);
    // Below AVX-512 oneDNN's check for 16-bit support fails and PyTorch takes ATen's erf kernel.
    if ((r.op == OpKind::gelu || r.op == OpKind::gelu_backward) && r.x_dtype != ScalarType::f32 && text.value("onednn_isa") &&
        *text.value("onednn_isa") != "avx512_core")
      throw Error(fmt::format("order '{}': gelu in {} under onednn_isa={} is not modelled (PyTorch takes ATen's erf kernel there); f32 is",
                              r.order, name(r.x_dtype), *text.value("onednn_isa")));
    // A strided input of GELU's erf form is ATen's erf kernel's in PyTorch, not oneDNN's, whose
    // contiguous code this order models: inner_loop=row would claim bits it does not have.
    if ((r.op == OpKind::gelu || r.op == OpKind::gelu_backward) && text.value("inner_loop") && *text.value("inner_loop") == "row")
      throw Error(fmt::format("order '{}': {} over rows of a strided input is ATen's erf kernel in PyTorch, not oneDNN's, which this order "
                              "models (contiguous inputs only); inner_loop=row is silu's and gelu_tanh's",
                              r.order, name(r.op)));
  } else if (text.has_params) {
    if (n->reproduces_reference)
      throw Error(fmt::format("order '{}' reproduces a reference and takes no parameters (got '{}')", n->name, text.inside()));
    if (!text.closed) throw Error(fmt::format("order '{}': missing ')'", r.order));
    // The block kernels of PyTorch's CUDA layer_norm are fixed trees (gen/ops/team.cpp): no parameter
    // of the CPU orders (lanes, fma, affine, ...) has a meaning there.
    if (r.op == OpKind::layer_norm && (o.moments.kind == K::BlockWelford || o.moments.kind == K::BlockReduceWelford))
      throw Error(fmt::format("order '{}' is PyTorch's CUDA layer_norm tree and takes no parameters (got '{}')", n->name, text.inside()));
    apply_parameters(o, text);
  }
  if (r.seq_k_at_launch && (o.attention.kind != AttentionOrder::Kind::Flash || o.attention.team > 0))
    throw FixedLengthError(fmt::format("order '{}' builds its attention for one S_k ({}); S_k at launch needs a flash order whose program instance is "
                            "one thread (fast, flash): give seq_k",
                            r.order, o.attention.kind != AttentionOrder::Kind::Flash ? "the key blocks and tails of its reference are fixed then"
                                                                                   : "a team stages whole key blocks in shared memory"));
  if (r.seq_k_at_launch && r.op == OpKind::attention_backward && !attention_backward_fused(r))
    throw FixedLengthError(fmt::format("order '{}' runs this attention_backward as two stages, whose grids are cut by S_k ({}): give seq_k", r.order,
                                       cuda_target(r) ? "the CUDA targets" : "S_q's scratch past 1 MiB"));
  if (n->device_only && r.target != Target::cuda)
    throw Error(fmt::format("order '{}' is device-only: it calls CUDA's rsqrtf/expf/logf, which have no definition off the GPU, so "
                            "it runs on target cuda only, not {}{}",
                            n->name, name(r.target), r.op == OpKind::layer_norm ? "; torch-cuda-tree is the same tree on every target"
                                                                                : "; warp-butterfly is the same tree on every target"));
  if (std::string why = shape_error(r, o, *n, text, host); !why.empty()) throw Error(why);
  if (r.op == OpKind::attention && o.attention.team > 0) {
    // K and V tiles of Bc rows and the block's scores (Bc per thread), as f32 in shared memory.
    const AttentionOrder& a = o.attention;
    if (a.kind != AttentionOrder::Kind::Flash) throw Error(fmt::format("order '{}': threads applies to flash orders only", r.order));
    const int64_t bc = std::min<int64_t>(a.key_block, r.seq_k);
    const int64_t bytes = 4 * (2 * bc * r.cols + bc * a.team);
    if (bytes > 48 * 1024)
      throw Error(fmt::format("order '{}' needs {} bytes of shared memory per block (K and V tiles of {} x D = {}, {} scores per thread), "
                              "over CUDA's 48 KiB; use a smaller bc or threads",
                              r.order, bytes, bc, r.cols, bc));
  }
  if (r.op == OpKind::attention && o.attention.kind == AttentionOrder::Kind::Materialized) {
    // The scores of an instance's query rows live on the stack of the thread running it.
    const int64_t bytes = int64_t(o.attention.query_lanes) * r.seq_k * size_bytes(r.x_dtype);
    if (bytes > AttentionOrder::kKeptScoresBytes)
      throw Error(fmt::format("order '{}' keeps {} x S_k = {} scores per instance ({} bytes, over 2 MiB); use exact-tiled for the same bits "
                              "in O(D) memory", r.order, o.attention.query_lanes, r.seq_k, bytes));
  }
  return o;
}

}  // namespace ordo::gen
