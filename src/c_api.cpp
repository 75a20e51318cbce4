// The C API (include/ordo/ordo.h) over the C++ one. Every entry point catches everything:
// ordo::Error becomes ORDO_ERROR_INVALID with its message, anything else ORDO_ERROR_INTERNAL.
#include "ordo/ordo.h"

#include <fmt/format.h>

#include <charconv>
#include <string>

#include "ir/error.hpp"
#include "ordo/ordo.hpp"

struct ordo_request {
  ordo::Request r;
};
struct ordo_kernel {
  ordo::KernelHandle k;
};

namespace {

thread_local std::string last_error;
thread_local int last_code = ORDO_OK;

template <class F>
int guarded(F&& f) {
  try {
    last_error.clear();
    last_code = ORDO_OK;
    f();
    return ORDO_OK;
  } catch (const ordo::FixedLengthError& e) {
    last_error = e.what();
    return last_code = ORDO_ERROR_FIXED_LENGTH;
  } catch (const ordo::Error& e) {
    last_error = e.what();
    return last_code = ORDO_ERROR_INVALID;
  } catch (const std::exception& e) {
    last_error = fmt::format("internal error: {}", e.what());
    return last_code = ORDO_ERROR_INTERNAL;
  } catch (...) {
    last_error = "internal error: unknown exception";
    return last_code = ORDO_ERROR_INTERNAL;
  }
}

std::string text(const char* s, const char* what) {
  if (!s) throw ordo::Error(fmt::format("{} is NULL", what));
  return s;
}

ordo::ScalarType dtype(const std::string& v, const std::string& key) {
  auto t = ordo::parse_scalar_type(v);
  if (!t) throw ordo::Error(fmt::format("{}: '{}' is not f32, bf16, f16 or f64", key, v));
  return *t;
}

std::optional<ordo::AttentionMask> mask(const std::string& v) {
  if (v == "none") return std::nullopt;
  auto m = ordo::AttentionMask::parse(v);
  if (!m) throw ordo::Error(fmt::format("mask: '{}' is not none or <dtype>:<dims> (dims: B or 1, H or 1, Q or 1, K or 1; e.g. f32:B1QK)", v));
  return m;
}

int64_t integer(const std::string& v, const std::string& key) {
  int64_t out = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size()) throw ordo::Error(fmt::format("{}: '{}' is not an integer", key, v));
  return out;
}

double number(const std::string& v, const std::string& key) {
  size_t used = 0;
  double d = 0;
  try {
    d = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (v.empty() || used != v.size()) throw ordo::Error(fmt::format("{}: '{}' is not a number", key, v));
  return d;
}

bool flag(const std::string& v, const std::string& key) {
  if (v == "0" || v == "1") return v == "1";
  throw ordo::Error(fmt::format("{}: '{}' is not 0 or 1", key, v));
}

int c_dtype(ordo::ScalarType t) {
  switch (t) {
    case ordo::ScalarType::f64: return ORDO_F64;
    case ordo::ScalarType::f32: return ORDO_F32;
    case ordo::ScalarType::f16: return ORDO_F16;
    case ordo::ScalarType::bf16: return ORDO_BF16;
    case ordo::ScalarType::i64: return ORDO_I64;
    default: return -1;
  }
}

}  // namespace

extern "C" {

const char* ordo_last_error(void) { return last_error.c_str(); }
int ordo_last_error_code(void) { return last_code; }

ordo_request* ordo_request_new(const char* op) {
  ordo_request* out = nullptr;
  guarded([&] {
    const std::string name = text(op, "op");
    auto kind = ordo::parse_op(name);
    if (!kind) throw ordo::Error(fmt::format("unknown op '{}'; ops: layer_norm, rms_norm, var_mean, sum, mean, silu, gelu_tanh, gelu, softmax, log_softmax, attention, "
                                    "cross_entropy, and their *_backward", name));
    out = new ordo_request{};
    out->r.op = *kind;
    out->r.has_weight = ordo::forward_of(*kind) == ordo::OpKind::layer_norm || ordo::forward_of(*kind) == ordo::OpKind::rms_norm;
    out->r.has_bias = ordo::forward_of(*kind) == ordo::OpKind::layer_norm;
  });
  return out;
}

int ordo_request_set(ordo_request* req, const char* key_c, const char* value_c) {
  return guarded([&] {
    if (!req) throw ordo::Error("request is NULL");
    const std::string key = text(key_c, "key"), v = text(value_c, "value");
    ordo::Request& r = req->r;
    if (key == "cols" && v == "launch") {
      r.cols_at_launch = true;
      r.cols = 0;
    } else if (key == "cols") r.cols = integer(v, key);
    else if (key == "dtype") r.x_dtype = dtype(v, key);
    else if (key == "weight_dtype") r.weight_dtype = dtype(v, key);
    else if (key == "acc") r.acc_dtype = dtype(v, key);
    else if (key == "order") r.order = v;
    else if (key == "eps") r.eps = number(v, key);
    else if (key == "target") {
      auto t = ordo::parse_target(v);
      if (!t) throw ordo::Error(fmt::format("target: '{}' is not cpu, interpreter, cuda or cuda-emu", v));
      r.target = *t;
    } else if (key == "weight") r.has_weight = flag(v, key);
    else if (key == "bias") r.has_bias = flag(v, key);
    else if (key == "allow_mixed_dtypes") r.allow_mixed_dtypes = flag(v, key);
    else if (key == "rows_in_flight") {
      // Range-checked before it narrows to int: a value past INT_MAX must not wrap into range.
      const int64_t n = integer(v, key);
      if (n < 0 || n > 16) throw ordo::Error(fmt::format("rows_in_flight: {} outside [0, 16]", n));
      r.rows_in_flight = static_cast<int>(n);
    }
    else if (key == "seq_q") r.seq_q = integer(v, key);
    else if (key == "seq_k" && v == "launch") {
      r.seq_k_at_launch = true;
      r.seq_k = 0;
    } else if (key == "seq_k") r.seq_k = integer(v, key);
    else if (key == "heads") r.heads = integer(v, key);
    else if (key == "kv_group") r.kv_group = integer(v, key);
    else if (key == "q_row_stride") r.q_row_stride = integer(v, key);
    else if (key == "k_row_stride") r.k_row_stride = integer(v, key);
    else if (key == "v_row_stride") r.v_row_stride = integer(v, key);
    else if (key == "causal") r.causal = flag(v, key);
    else if (key == "mask") r.mask = mask(v);
    else if (key == "lse") r.lse_output = flag(v, key);
    else if (key == "scale") r.scale = number(v, key);
    else if (key == "ignore_index") r.ignore_index = integer(v, key);
    else if (key == "reduction") {
      auto red = ordo::parse_loss_reduction(v);
      if (!red) throw ordo::Error(fmt::format("reduction: '{}' is not mean, sum or none", v));
      r.reduction = *red;
    } else
      throw ordo::Error(fmt::format("unknown request key '{}' (cols, dtype, weight_dtype, acc, order, eps, target, weight, bias, "
                                    "allow_mixed_dtypes, rows_in_flight; attention: seq_q, seq_k, heads, kv_group, q_row_stride, k_row_stride, v_row_stride, "
                                    "causal, mask, scale, lse; cross_entropy: ignore_index, reduction)", key));
  });
}

void ordo_request_free(ordo_request* r) { delete r; }

ordo_kernel* ordo_compile(const ordo_request* r) {
  ordo_kernel* out = nullptr;
  guarded([&] {
    if (!r) throw ordo::Error("request is NULL");
    out = new ordo_kernel{ordo::compile(r->r)};
  });
  return out;
}

void ordo_kernel_release(ordo_kernel* k) { delete k; }

int ordo_kernel_num_args(const ordo_kernel* k) {
  int n = -1;
  guarded([&] {
    if (!k) throw ordo::Error("kernel is NULL");
    n = static_cast<int>(k->k->args().size());
  });
  return n;
}

// ordo_kernel_arg reports an argument's extent as its ArgExtent value.
static_assert(int(ordo::ArgExtent::rows_by_cols) == ORDO_EXTENT_ROWS_BY_COLS && int(ordo::ArgExtent::cols) == ORDO_EXTENT_COLS &&
              int(ordo::ArgExtent::rows) == ORDO_EXTENT_ROWS && int(ordo::ArgExtent::rows_by_fixed) == ORDO_EXTENT_ROWS_BY_FIXED &&
              int(ordo::ArgExtent::fixed) == ORDO_EXTENT_FIXED && int(ordo::ArgExtent::row_groups) == ORDO_EXTENT_ROW_GROUPS);

int ordo_kernel_arg(const ordo_kernel* k, int i, const char** name, int* dt, int* is_output, int* extent) {
  return guarded([&] {
    if (!k) throw ordo::Error("kernel is NULL");
    const auto& args = k->k->args();
    if (i < 0 || i >= static_cast<int>(args.size()))
      throw ordo::Error(fmt::format("argument {} out of range [0, {})", i, args.size()));
    const ordo::ArgSpec& a = args[static_cast<size_t>(i)];
    if (name) *name = a.name.c_str();
    if (dt) *dt = c_dtype(a.dtype);
    if (is_output) *is_output = a.output ? 1 : 0;
    if (extent) *extent = static_cast<int>(a.extent);
  });
}

int ordo_kernel_arg_elements(const ordo_kernel* k, int i, int64_t rows, int64_t* elements) {
  return ordo_kernel_arg_elements_sized(k, i, rows, nullptr, 0, elements);
}

namespace {
// The launch's sizes from a C array, checked against the kernel's count.
std::vector<int64_t> launch_sizes(const ordo_kernel* k, const int64_t* sizes, int num_sizes) {
  const std::vector<std::string>& names = k->k->sizes();
  if (num_sizes < 0 || static_cast<size_t>(num_sizes) != names.size()) {
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    throw ordo::Error(fmt::format("the kernel takes {} size argument(s){}, got num_sizes = {}", names.size(),
                                  list.empty() ? "" : fmt::format(" ({})", list), num_sizes));
  }
  if (num_sizes > 0 && !sizes) throw ordo::Error("sizes must not be NULL");
  for (int i = 0; i < num_sizes; ++i)
    if (sizes[i] < 1 || sizes[i] > (int64_t(1) << 24))
      throw ordo::Error(fmt::format("{} = {} outside [1, 2^24]", names[static_cast<size_t>(i)], sizes[i]));
  return std::vector<int64_t>(sizes, sizes + num_sizes);
}
}  // namespace

int ordo_set_executor(const char* name) {
  return guarded([&] {
    if (!name) throw ordo::Error("executor name is NULL");
    const std::string_view n(name);
    if (n != "pool" && n != "openmp") throw ordo::Error(fmt::format("executor '{}': expected pool or openmp", n));
    ordo::set_executor(n == "pool" ? ordo::Executor::pool : ordo::Executor::openmp);
  });
}

int ordo_kernel_num_sizes(const ordo_kernel* k) {
  int n = -1;
  guarded([&] {
    if (!k) throw ordo::Error("kernel is NULL");
    n = static_cast<int>(k->k->sizes().size());
  });
  return n;
}

const char* ordo_kernel_size_name(const ordo_kernel* k, int i) {
  const char* name = nullptr;
  guarded([&] {
    if (!k) throw ordo::Error("kernel is NULL");
    const std::vector<std::string>& names = k->k->sizes();
    if (i < 0 || static_cast<size_t>(i) >= names.size()) throw ordo::Error(fmt::format("size {} out of range [0, {})", i, names.size()));
    name = names[static_cast<size_t>(i)].c_str();
  });
  return name;
}

int ordo_kernel_arg_elements_sized(const ordo_kernel* k, int i, int64_t rows, const int64_t* sizes, int num_sizes, int64_t* elements) {
  return guarded([&] {
    if (!k) throw ordo::Error("kernel is NULL");
    const auto& args = k->k->args();
    if (i < 0 || i >= static_cast<int>(args.size()))
      throw ordo::Error(fmt::format("argument {} out of range [0, {})", i, args.size()));
    if (rows < 0) throw ordo::Error(fmt::format("rows must be >= 0, got {}", rows));
    const std::vector<int64_t> given = launch_sizes(k, sizes, num_sizes);
    const std::optional<int64_t> n = args[static_cast<size_t>(i)].checked_elements(rows, k->k->launch_cols(given), given);
    if (!n) throw ordo::Error(fmt::format("rows={} makes more than 2^63 elements", rows));
    if (elements) *elements = *n;
  });
}

int ordo_kernel_run(const ordo_kernel* k, void* const* buffers, const int64_t* elements, int64_t rows, int threads) {
  return ordo_kernel_run_sized(k, buffers, elements, rows, nullptr, 0, threads);
}

int ordo_kernel_run_sized(const ordo_kernel* k, void* const* buffers, const int64_t* elements, int64_t rows, const int64_t* sizes,
                          int num_sizes, int threads) {
  return guarded([&] {
    if (!k) throw ordo::Error("kernel is NULL");
    const auto& args = k->k->args();
    if (!args.empty() && (!buffers || !elements)) throw ordo::Error("buffers and elements must not be NULL");
    std::vector<ordo::BufferRef> refs;
    for (size_t i = 0; i < args.size(); ++i) refs.push_back({buffers[i], elements[i], args[i].dtype});
    k->k->run_with_sizes(refs, rows, launch_sizes(k, sizes, num_sizes), threads);
  });
}

}  // extern "C"
