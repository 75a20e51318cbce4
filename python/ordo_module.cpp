// The `ordo._ordo` extension: compile kernels and run them on DLPack tensors without copying.
// The Python layer (python/ordo/__init__.py) allocates outputs and shapes results; this file
// only moves pointers.
//
// DLPack (the data-interchange ABI every array library exports through __dlpack__): the
// structs below follow its published v0.x layout. A consumer takes ownership of a capsule named
// "dltensor", renames it "used_dltensor", and calls the tensor's deleter when done.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <dlfcn.h>

#include "gen/gen.hpp"
#include "ir/error.hpp"
#include "ordo/plot.hpp"
#include "ordo/compare.hpp"
#include "ordo/ordo.hpp"
#include "python/aten_shim.h"

namespace py = pybind11;

namespace {

struct DLDevice {
  int32_t device_type;  // 1: CPU
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; NULL means compact row-major
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};

// One consumed capsule: the tensor stays alive until this is destroyed.
class Borrowed {
 public:
  Borrowed(py::capsule cap, const std::string& what) : what_(what) {
    if (std::string(cap.name() ? cap.name() : "") != "dltensor")
      throw ordo::Error(what + ": not an unused DLPack capsule (named 'dltensor')");
    t_ = static_cast<DLManagedTensor*>(cap.get_pointer());
    PyCapsule_SetName(cap.ptr(), "used_dltensor");
  }
  Borrowed(const Borrowed&) = delete;
  Borrowed(Borrowed&& o) noexcept : what_(std::move(o.what_)), t_(o.t_) { o.t_ = nullptr; }
  ~Borrowed() {
    if (t_ && t_->deleter) t_->deleter(t_);
  }

  // The element type as ordo names it. bf16 may arrive as DLPack bfloat or as uint16 bits.
  ordo::ScalarType dtype() const {
    const DLDataType d = t_->dl_tensor.dtype;
    if (d.lanes != 1) throw ordo::Error(what_ + ": vector dtypes are not supported");
    if (d.code == 2 && d.bits == 32) return ordo::ScalarType::f32;
    if (d.code == 2 && d.bits == 16) return ordo::ScalarType::f16;
    if ((d.code == 4 && d.bits == 16) || (d.code == 1 && d.bits == 16)) return ordo::ScalarType::bf16;
    if (d.code == 2 && d.bits == 64) return ordo::ScalarType::f64;
    if (d.code == 0 && d.bits == 64) return ordo::ScalarType::i64;  // cross_entropy's class indices
    throw ordo::Error(what_ + ": dtype code " + std::to_string(d.code) + " bits " + std::to_string(d.bits) +
                      " is not float32, float16, bfloat16 or (class indices) int64");
  }
  int64_t elements() const {
    int64_t n = 1;
    for (int i = 0; i < t_->dl_tensor.ndim; ++i) n *= t_->dl_tensor.shape[i];
    return n;
  }
  void* data() const {
    const DLTensor& t = t_->dl_tensor;
    if (t.device.device_type != 1) throw ordo::Error(what_ + ": not a CPU tensor (ordo's Python API runs on the CPU)");
    if (t.strides) {  // compact row-major only: ordo reads rows as contiguous memory
      int64_t expect = 1;
      for (int i = t.ndim - 1; i >= 0; --i) {
        if (t.shape[i] != 1 && t.strides[i] != expect) throw ordo::Error(what_ + ": not contiguous; call .contiguous() first");
        expect *= t.shape[i];
      }
    }
    return static_cast<char*>(t.data) + t.byte_offset;
  }

 private:
  std::string what_;
  DLManagedTensor* t_ = nullptr;
};

// Python exceptions: ordo::Error (the caller's input) becomes ValueError, and ordo::FixedLengthError
// (a length asked for at launch that the order builds its kernel for) its subclass
// ordo._ordo.FixedLengthError, created when the module loads.
PyObject* fixed_length_error = nullptr;

template <class F>
auto translate(F&& f) {
  try {
    return f();
  } catch (const ordo::FixedLengthError& e) {
    PyErr_SetString(fixed_length_error, e.what());
    throw py::error_already_set();
  } catch (const ordo::Error& e) {
    throw py::value_error(e.what());
  }
}

ordo::ScalarType dtype_named(const std::string& s) {
  auto t = ordo::parse_scalar_type(s);
  if (!t) throw ordo::Error("dtype '" + s + "' is not f32, bf16 or f16");
  return *t;
}

// torch's dtype objects, looked up once (run_torch is only called with torch tensors, so torch is
// imported by then) and compared by identity: a str() of each tensor's dtype cost more than the
// rest of a small call's checks. Never released: the interpreter owns them until it exits.
struct TorchDtypes {
  py::handle f32, bf16, f16, f64, i64;
};
// The tensor attributes run_torch reads, as interned strings made once: pybind11's attr("name")
// makes a new string on every call, a measurable part of a small call's cost.
struct TensorAttributes {
  py::handle is_cpu, is_contiguous, dtype, data_ptr, numel;
};
const TensorAttributes& tensor_attributes() {
  static const TensorAttributes a = [] {
    auto interned = [](const char* s) { return py::handle(PyUnicode_InternFromString(s)); };
    return TensorAttributes{interned("is_cpu"), interned("is_contiguous"), interned("dtype"), interned("data_ptr"), interned("numel")};
  }();
  return a;
}
const TorchDtypes& torch_dtypes() {
  static const TorchDtypes d = [] {
    py::module_ torch = py::module_::import("torch");
    auto dtype = [&](const char* name) { return py::object(torch.attr(name)).release(); };
    return TorchDtypes{dtype("float32"), dtype("bfloat16"), dtype("float16"), dtype("float64"), dtype("int64")};
  }();
  return d;
}

py::handle torch_dtype(ordo::ScalarType t) {
  const TorchDtypes& d = torch_dtypes();
  switch (t) {
    case ordo::ScalarType::f32: return d.f32;
    case ordo::ScalarType::bf16: return d.bf16;
    case ordo::ScalarType::f16: return d.f16;
    case ordo::ScalarType::f64: return d.f64;
    case ordo::ScalarType::i64: return d.i64;
    default: break;
  }
  throw ordo::Error(std::string("no torch dtype for ") + std::string(ordo::name(t)));
}

// The ATen shim (python/aten_shim.h), once load_aten_shim has loaded it: torch tensors read and
// allocated in C++ instead of through Python. Null until then, and where it cannot be used.
struct AtenShim {
  int32_t (*tensor)(PyObject*, OrdoAtenTensor*) = nullptr;
  PyObject* (*empty)(PyObject*, int32_t, int32_t) = nullptr;
};
AtenShim aten_shim;

// dlopens the shim at `path` and keeps its functions if it is this module's interface version and
// was built for `torch_version` (the running torch's). "" when loaded, else why not (then unloaded).
std::string load_aten_shim(const std::string& path, const std::string& torch_version) {
  if (aten_shim.tensor) return "";
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) return std::string("dlopen: ") + dlerror();
  auto abi = reinterpret_cast<int32_t (*)()>(dlsym(lib, "ordo_aten_shim_abi"));
  auto version = reinterpret_cast<const char* (*)()>(dlsym(lib, "ordo_aten_torch_version"));
  auto tensor = reinterpret_cast<int32_t (*)(PyObject*, OrdoAtenTensor*)>(dlsym(lib, "ordo_aten_tensor"));
  auto empty = reinterpret_cast<PyObject* (*)(PyObject*, int32_t, int32_t)>(dlsym(lib, "ordo_aten_empty"));
  std::string why;
  if (!abi || !version || !tensor || !empty) why = path + " lacks the shim's functions";
  else if (abi() != kOrdoAtenShimAbi) why = "the shim's interface is version " + std::to_string(abi()) + ", this module's " + std::to_string(kOrdoAtenShimAbi);
  else if (torch_version != version()) why = std::string("the shim was built for torch ") + version() + ", the running torch is " + torch_version;
  if (!why.empty()) {
    dlclose(lib);
    return why;
  }
  aten_shim.tensor = tensor;
  aten_shim.empty = empty;
  return "";  // never unloaded: tensors may hold nothing of it, but its functions stay in use
}

ordo::ScalarType from_shim(int32_t dtype, const std::string& what) {
  switch (dtype) {
    case kOrdoAtenF32: return ordo::ScalarType::f32;
    case kOrdoAtenBF16: return ordo::ScalarType::bf16;
    case kOrdoAtenF16: return ordo::ScalarType::f16;
    case kOrdoAtenF64: return ordo::ScalarType::f64;
    case kOrdoAtenI64: return ordo::ScalarType::i64;
    default: throw ordo::Error("internal: " + what + ": the shim's dtype code " + std::to_string(dtype) + " reached a kernel argument");
  }
}

int32_t to_shim(ordo::ScalarType t) {
  switch (t) {
    case ordo::ScalarType::f32: return kOrdoAtenF32;
    case ordo::ScalarType::bf16: return kOrdoAtenBF16;
    case ordo::ScalarType::f16: return kOrdoAtenF16;
    case ordo::ScalarType::f64: return kOrdoAtenF64;
    case ordo::ScalarType::i64: return kOrdoAtenI64;
    default: break;
  }
  throw ordo::Error(std::string("no torch dtype for ") + std::string(ordo::name(t)));
}

// A torch tensor as the shim reads it; false without the shim or for an object it does not read.
bool shim_tensor(py::handle t, OrdoAtenTensor& out) { return aten_shim.tensor && aten_shim.tensor(t.ptr(), &out) == 0; }

// A tensor's address as an integer (Tensor.data_ptr()).
void* torch_data(py::handle t) {
  if (OrdoAtenTensor info; shim_tensor(t, info)) return info.data;
  return reinterpret_cast<void*>(t.attr(tensor_attributes().data_ptr)().cast<uintptr_t>());
}

// A CPU torch tensor's memory as a kernel argument, with the checks DLPack's consumer makes: the
// CPU, a compact row-major layout, the dtype. Read by the ATen shim where it is loaded, else
// through Python (this module does not link torch). The kernel checks the length.
ordo::BufferRef torch_buffer(py::handle t, const std::string& what) {
  // A dtype the kernels never take goes the Python way, whose refusal names it.
  if (OrdoAtenTensor info; shim_tensor(t, info) && info.dtype != kOrdoAtenOther) {
    if (!info.cpu) throw ordo::Error(what + ": not a CPU tensor (ordo's Python API runs on the CPU)");
    if (!info.contiguous) throw ordo::Error(what + ": not contiguous; call .contiguous() first");
    return {info.data, info.numel, from_shim(info.dtype, what)};
  }
  const TensorAttributes& attr = tensor_attributes();
  const TorchDtypes& dtypes = torch_dtypes();
  if (!t.attr(attr.is_cpu).cast<bool>()) throw ordo::Error(what + ": not a CPU tensor (ordo's Python API runs on the CPU)");
  if (!t.attr(attr.is_contiguous)().cast<bool>()) throw ordo::Error(what + ": not contiguous; call .contiguous() first");
  const py::object dtype = t.attr(attr.dtype);
  ordo::ScalarType type;
  if (dtype.is(dtypes.f32)) type = ordo::ScalarType::f32;
  else if (dtype.is(dtypes.bf16)) type = ordo::ScalarType::bf16;
  else if (dtype.is(dtypes.f16)) type = ordo::ScalarType::f16;
  else if (dtype.is(dtypes.f64)) type = ordo::ScalarType::f64;
  else if (dtype.is(dtypes.i64)) type = ordo::ScalarType::i64;
  else throw ordo::Error(what + ": dtype " + py::str(dtype).cast<std::string>() + " is not float32, float16, bfloat16 or (class indices) int64");
  return {torch_data(t), t.attr(attr.numel)().cast<int64_t>(), type};
}

// This thread's memory for output `index` of a row call that discards it (run_rows' statistics),
// at least `bytes` long; kept for the thread's next call.
void* discarded_output(size_t index, size_t bytes) {
  thread_local std::vector<std::vector<std::byte>> held;
  if (held.size() <= index) held.resize(index + 1);
  if (held[index].size() < bytes) held[index].resize(bytes);
  return held[index].data();
}

// How kernels store into outputs torch has just allocated. Cached, never streaming: torch's
// allocator maps a large block afresh on every call (glibc serves everything above 32 MiB, the
// size from which CompiledKernel::Stores::automatic would stream, with a new mmap), so each page
// is first touched by the kernel, and non-temporal stores into pages the kernel has just faulted
// in cost more than stores through the cache (measured: an 8192x4096 f32 layer_norm into a fresh
// output took 55 ms streaming and 46 ms through the cache, torch's own call 44-48 ms).
constexpr ordo::CompiledKernel::Stores kFreshOutputStores = ordo::CompiledKernel::Stores::cached;

// A forward row op (norm or softmax) over x's last dim, as ordo.torch calls it when nothing
// records the call (ordo.torch._direct): x, weight and bias (None: absent) by their argument
// names; the row-shaped output allocated by torch (empty_like(x), or empty in its own dtype) and
// returned; the per-row statistics (mean, rstd), which such a call discards, written to this
// thread's memory instead of tensors. An op whose one output is per row (sum, mean) returns it,
// allocated by torch in x's shape without the last dim. What the Python loop it replaces did, without its per-call
// interpreter cost: a 1x4096 call is a few microseconds in all.
py::object run_rows(const ordo::CompiledKernel& k, py::handle x_in, py::handle weight, py::handle bias, bool n_at_launch) {
  static const py::handle empty_like = py::object(py::module_::import("torch").attr("empty_like")).release();
  static const py::handle empty = py::object(py::module_::import("torch").attr("empty")).release();
  static const py::handle contiguous_name = PyUnicode_InternFromString("contiguous");
  static const py::handle shape_name = PyUnicode_InternFromString("shape");
  py::object x = py::reinterpret_borrow<py::object>(x_in);
  OrdoAtenTensor info{};
  const bool by_shim = shim_tensor(x, info);
  if (by_shim ? !info.contiguous : !x.attr(tensor_attributes().is_contiguous)().cast<bool>()) {
    x = x.attr(contiguous_name)();
    if (by_shim && !shim_tensor(x, info)) throw ordo::Error("internal: x.contiguous() is not a tensor");
  }
  int64_t cols = 0, rows = 1;
  py::tuple shape;  // without the shim: x's shape, for torch.empty
  if (by_shim) {
    if (info.ndim == 0) throw ordo::Error("x: a 0-dim tensor has no row to reduce");
    cols = info.sizes[info.ndim - 1];
    for (int32_t i = 0; i + 1 < info.ndim; ++i) rows *= info.sizes[i];
  } else {
    shape = x.attr(shape_name);
    if (shape.size() == 0) throw ordo::Error("x: a 0-dim tensor has no row to reduce");
    cols = shape[shape.size() - 1].cast<int64_t>();
    for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i].cast<int64_t>();
  }
  const ordo::BufferRef x_ref = torch_buffer(x, "x");
  // A new contiguous CPU tensor of x's shape (or without its last dim) and `dtype`: nothing to check.
  auto allocate = [&](ordo::ScalarType dtype, bool drop_last_dim) -> py::object {
    if (by_shim) {
      PyObject* made = aten_shim.empty(x.ptr(), to_shim(dtype), drop_last_dim ? 1 : 0);
      if (!made) throw py::error_already_set();
      return py::reinterpret_steal<py::object>(made);
    }
    if (!drop_last_dim) return dtype == x_ref.dtype ? empty_like(x) : empty(shape, py::arg("dtype") = torch_dtype(dtype));
    return empty(py::tuple(shape[py::slice(0, static_cast<py::ssize_t>(shape.size()) - 1, 1)]), py::arg("dtype") = torch_dtype(dtype));
  };
  py::object y;
  std::vector<ordo::BufferRef> refs;
  const auto& args = k.args();
  refs.reserve(args.size());
  int outputs = 0;
  bool row_shaped = false;
  for (const ordo::ArgSpec& a : args) {
    outputs += a.output;
    row_shaped |= a.output && a.extent == ordo::ArgExtent::rows_by_cols;
  }
  const bool per_row_result = outputs == 1 && !row_shaped;  // sum, mean: the result is their one per-row output
  for (size_t i = 0; i < args.size(); ++i) {
    const ordo::ArgSpec& a = args[i];
    if (!a.output) {
      py::handle given = a.name == "x" ? py::handle(x) : a.name == "weight" ? weight : a.name == "bias" ? bias : py::handle();
      if (!given || given.is_none()) throw ordo::Error(a.name + ": the kernel takes it, the call gave none");
      refs.push_back(a.name == "x" ? x_ref : torch_buffer(given, a.name));
    } else if (a.extent == ordo::ArgExtent::rows_by_cols) {
      if (y) throw ordo::Error("internal: " + std::string(ordo::name(k.request().op)) + " has two row-shaped outputs");
      y = allocate(a.dtype, false);
      refs.push_back({torch_data(y), rows * cols, a.dtype});
    } else if (a.extent == ordo::ArgExtent::rows && per_row_result) {
      y = allocate(a.dtype, true);
      refs.push_back({torch_data(y), rows, a.dtype});
    } else if (a.extent == ordo::ArgExtent::rows) {
      refs.push_back({discarded_output(i, static_cast<size_t>(rows) * ordo::size_bytes(a.dtype)), rows, a.dtype});
    } else {
      throw ordo::Error("internal: " + a.name + " is not a row op's argument");
    }
  }
  if (!y) throw ordo::Error("internal: " + std::string(ordo::name(k.request().op)) + " has no result to return");
  {
    py::gil_scoped_release unlocked;  // x, weight, bias and y are held by this frame
    k.run_with_sizes(refs, rows, n_at_launch ? std::vector<int64_t>{cols} : std::vector<int64_t>{}, 0, kFreshOutputStores);
  }
  return y;
}

// compile(r), or with resolve_only only the request's checks against its order (gen::resolve:
// every refusal a compile would raise for the request itself), building nothing: None then.
std::shared_ptr<ordo::CompiledKernel> compile_or_resolve(const ordo::Request& r, bool resolve_only) {
  if (resolve_only) {
    (void)ordo::gen::resolve(r);
    return nullptr;
  }
  return std::const_pointer_cast<ordo::CompiledKernel>(ordo::compile(r));
}
}  // namespace

PYBIND11_MODULE(_ordo, m) {
  m.doc() = "ordo's native layer: kernels by request, run on DLPack tensors";
  fixed_length_error = PyErr_NewExceptionWithDoc("ordo._ordo.FixedLengthError",
                                                 "The order builds its kernel for one length; the request asked for it at launch.",
                                                 PyExc_ValueError, nullptr);
  if (!fixed_length_error) throw py::error_already_set();
  m.attr("FixedLengthError") = py::handle(fixed_length_error);

  py::class_<ordo::CompiledKernel, std::shared_ptr<ordo::CompiledKernel>>(m, "Kernel")
      .def_property_readonly("args", [](const ordo::CompiledKernel& k) {
        py::list out;
        for (const ordo::ArgSpec& a : k.args())
          out.append(py::make_tuple(a.name, std::string(ordo::name(a.dtype)), a.output, std::string(ordo::name(a.extent))));
        return out;
      })
      .def_property_readonly("order", [](const ordo::CompiledKernel& k) { return k.request().order; })
      // The lengths each launch gives (attention's S_k when it was asked for at launch).
      .def_property_readonly("sizes", [](const ordo::CompiledKernel& k) { return k.sizes(); })
      .def("run", [](const ordo::CompiledKernel& k, py::list capsules, int64_t rows, int threads, const std::vector<int64_t>& sizes) {
        translate([&] {
          std::vector<Borrowed> held;
          std::vector<ordo::BufferRef> refs;
          const auto& args = k.args();
          if (capsules.size() != args.size())
            throw ordo::Error("kernel takes " + std::to_string(args.size()) + " tensors, got " + std::to_string(capsules.size()));
          for (size_t i = 0; i < args.size(); ++i) {
            held.emplace_back(capsules[i].cast<py::capsule>(), args[i].name);
            refs.push_back({held.back().data(), held.back().elements(), held.back().dtype()});
          }
          py::gil_scoped_release unlocked;  // kernels run on ordo's own threads
          k.run_with_sizes(refs, rows, sizes, threads);
          return 0;
        });
      }, py::arg("tensors"), py::arg("rows"), py::arg("threads") = 0, py::arg("sizes") = std::vector<int64_t>{})
      // The same for torch tensors, read by pointer: DLPack's capsules cost about 5 µs a tensor,
      // most of a small call. This module does not link torch, so it asks each tensor through
      // Python, and checks what DLPack's consumer checks: the CPU, a compact row-major layout
      // and the dtype; the kernel checks the sizes.
      // fresh_outputs: the outputs were just allocated by torch (ordo.torch's calls), so they are
      // stored through the cache (kFreshOutputStores); else as CompiledKernel::Stores::automatic.
      .def("run_torch", [](const ordo::CompiledKernel& k, py::list tensors, int64_t rows, int threads, const std::vector<int64_t>& sizes,
                           bool fresh_outputs) {
        translate([&] {
          const auto& args = k.args();
          if (tensors.size() != args.size())
            throw ordo::Error("kernel takes " + std::to_string(args.size()) + " tensors, got " + std::to_string(tensors.size()));
          std::vector<ordo::BufferRef> refs;
          refs.reserve(args.size());
          for (size_t i = 0; i < args.size(); ++i) refs.push_back(torch_buffer(tensors[i], args[i].name));
          py::gil_scoped_release unlocked;  // the caller's list keeps the tensors alive
          k.run_with_sizes(refs, rows, sizes, threads, fresh_outputs ? kFreshOutputStores : ordo::CompiledKernel::Stores::automatic);
          return 0;
        });
      }, py::arg("tensors"), py::arg("rows"), py::arg("threads") = 0, py::arg("sizes") = std::vector<int64_t>{},
         py::arg("fresh_outputs") = false)
      .def("run_rows", [](const ordo::CompiledKernel& k, py::handle x, py::handle weight, py::handle bias, bool n_at_launch) {
        return translate([&] { return run_rows(k, x, weight, bias, n_at_launch); });
      }, py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("n_at_launch"));

  m.def("compile", [](const std::string& op, int64_t cols, const std::string& dtype, const std::string& weight_dtype,
                      const std::string& order, double eps, bool weight, bool bias, bool allow_mixed_dtypes,
                      const std::string& acc, bool saved_stats, bool cols_at_launch, int64_t ignore_index, const std::string& reduction,
                      bool resolve_only) {
    return translate([&] {
      ordo::Request r;
      auto kind = ordo::parse_op(op);
      if (!kind) throw ordo::Error("unknown op '" + op + "'");
      r.op = *kind;
      r.cols = cols;
      r.cols_at_launch = cols_at_launch;
      r.x_dtype = dtype_named(dtype);
      if (!weight_dtype.empty()) r.weight_dtype = dtype_named(weight_dtype);
      if (!acc.empty()) r.acc_dtype = dtype_named(acc);
      r.order = order;
      r.eps = eps;
      r.has_weight = weight;
      r.has_bias = bias;
      r.allow_mixed_dtypes = allow_mixed_dtypes;
      r.saved_stats = saved_stats;
      r.ignore_index = ignore_index;
      auto red = ordo::parse_loss_reduction(reduction);
      if (!red) throw ordo::Error("reduction '" + reduction + "' is not mean, sum or none");
      r.reduction = *red;
      return compile_or_resolve(r, resolve_only);
    });
  }, py::arg("op"), py::arg("cols"), py::arg("dtype"), py::arg("weight_dtype") = "", py::arg("order") = "fast",
     py::arg("eps") = 1e-5, py::arg("weight") = false, py::arg("bias") = false, py::arg("allow_mixed_dtypes") = false,
     py::arg("acc") = "", py::arg("saved_stats") = true, py::arg("cols_at_launch") = false, py::arg("ignore_index") = -100,
     py::arg("reduction") = "mean", py::arg("resolve_only") = false);

  m.def("compile_attention", [](int64_t head_dim, int64_t seq_q, int64_t seq_k, const std::string& dtype, const std::string& order,
                                bool causal, std::optional<double> scale, bool lse, const std::string& op, bool saved_stats, int64_t heads,
                                std::tuple<int64_t, int64_t, int64_t> row_strides, bool seq_k_at_launch, int64_t kv_group,
                                const std::string& mask, bool resolve_only) {
    return translate([&] {
      ordo::Request r;
      auto kind = ordo::parse_op(op);
      if (!kind || ordo::forward_of(*kind) != ordo::OpKind::attention) throw ordo::Error("compile_attention: op '" + op + "' is not attention's");
      r.op = *kind;
      r.saved_stats = saved_stats;
      r.cols = head_dim;
      r.seq_q = seq_q;
      r.seq_k = seq_k;
      r.seq_k_at_launch = seq_k_at_launch;
      r.heads = heads;
      r.kv_group = kv_group;
      if (!mask.empty()) {
        r.mask = ordo::AttentionMask::parse(mask);
        if (!r.mask) throw ordo::Error("compile_attention: mask '" + mask + "' is not <dtype>:<dims> (e.g. f32:B1QK)");
      }
      std::tie(r.q_row_stride, r.k_row_stride, r.v_row_stride) = row_strides;
      r.x_dtype = dtype_named(dtype);
      r.order = order;
      r.causal = causal;
      r.scale = scale;
      r.lse_output = lse;
      r.has_weight = r.has_bias = false;
      return compile_or_resolve(r, resolve_only);
    });
  }, py::arg("head_dim"), py::arg("seq_q"), py::arg("seq_k"), py::arg("dtype"), py::arg("order"), py::arg("causal") = false,
     py::arg("scale") = std::nullopt, py::arg("lse") = false, py::arg("op") = "attention", py::arg("saved_stats") = true, py::arg("heads") = 1,
     py::arg("row_strides") = std::tuple<int64_t, int64_t, int64_t>{0, 0, 0}, py::arg("seq_k_at_launch") = false,
     py::arg("kv_group") = 1, py::arg("mask") = "", py::arg("resolve_only") = false);

  // A bar chart of speed ratios (bench/vs_torch.py): rows of (label, ratio, target, lower_is_better).
  m.def("write_ratio_chart", [](const std::string& path, const std::string& heading,
                                const std::vector<std::tuple<std::string, double, double, bool>>& rows) {
    translate([&] {
      std::vector<ordo::RatioBar> bars;
      for (const auto& [label, ratio, target, lower] : rows) bars.push_back({label, ratio, target, lower});
      ordo::write_ratio_chart_png(path, heading, bars);
      return 0;
    });
  });

  // ordo.torch loads the ATen shim (python/aten_shim.h) after importing torch: "" when loaded,
  // else why not (the running torch is another version, or the shim was not built).
  m.def("load_aten_shim", &load_aten_shim, py::arg("path"), py::arg("torch_version"));
  m.def("aten_shim_loaded", [] { return aten_shim.tensor != nullptr; });

  m.def("cache_stats", [] {
    const ordo::CacheStats c = ordo::cache_stats();
    py::dict d;
    d["hits"] = c.hits;
    d["misses"] = c.misses;
    d["entries"] = c.entries;
    d["evictions"] = c.evictions;
    d["capacity"] = c.capacity;
    d["shared_programs"] = c.shared_programs;
    return d;
  });
  m.def("set_kernel_cache_capacity", [](int64_t entries) {
    translate([&] {
      if (entries < 1) throw ordo::Error("the kernel cache's capacity must be at least 1 kernel, got " + std::to_string(entries));
      ordo::set_kernel_cache_capacity(static_cast<size_t>(entries));
      return 0;
    });
  }, py::arg("entries"));
  // cross_entropy's class indices, checked before a launch as PyTorch checks them: the first
  // row whose target is neither ignore_index nor in [0, classes), as (row, target), or None. A
  // torch tensor is read by pointer; anything else through DLPack. The caller has checked the
  // dtype (int64) and the shape. One pass in C++: the same check in torch ops took 11 us a call.
  m.def("first_bad_target", [](py::handle target, int64_t classes, int64_t ignore_index) -> py::object {
    return translate([&]() -> py::object {
      std::optional<Borrowed> held;
      ordo::BufferRef ref;
      if (py::hasattr(target, "data_ptr")) {
        ref = torch_buffer(target, "target");
      } else {
        held.emplace(target.attr("__dlpack__")().cast<py::capsule>(), "target");
        ref = {held->data(), held->elements(), held->dtype()};
      }
      if (ref.dtype != ordo::ScalarType::i64) throw ordo::Error("target: class indices must be int64");
      const auto* t = static_cast<const int64_t*>(ref.data);
      for (int64_t i = 0; i < ref.elements; ++i)
        if (t[i] != ignore_index && (t[i] < 0 || t[i] >= classes)) return py::make_tuple(i, t[i]);
      return py::none();
    });
  }, py::arg("target"), py::arg("classes"), py::arg("ignore_index"));

  m.def("set_executor", [](const std::string& name) {
    translate([&] {
      if (name != "pool" && name != "openmp") throw ordo::Error("executor '" + name + "': expected pool or openmp");
      ordo::set_executor(name == "pool" ? ordo::Executor::pool : ordo::Executor::openmp);
      return 0;
    });
  }, py::arg("name"));
  m.def("executor", [] {
    return translate([&] { return std::string(ordo::executor() == ordo::Executor::pool ? "pool" : "openmp"); });
  });
  m.def("orders", [] {
    py::list out;
    for (const ordo::gen::NamedOrder& n : ordo::gen::named_orders()) {
      py::list ops, dtypes;
      for (ordo::OpKind o : n.ops) ops.append(std::string(ordo::name(o)));
      for (ordo::ScalarType t : n.dtypes) dtypes.append(std::string(ordo::name(t)));
      py::dict d;
      d["name"] = std::string(n.name);
      d["description"] = std::string(n.description);
      d["ops"] = ops;
      d["dtypes"] = dtypes;
      d["exact"] = n.reproduces_reference && !n.unverified;
      d["unverified"] = n.unverified;
      d["device_only"] = n.device_only;
      out.append(d);
    }
    return out;
  });

  m.def("compare", [](const std::string& op, int64_t cols, int64_t rows, const std::string& dtype, std::vector<std::string> orders,
                      uint64_t seed, double offset, double scale) {
    return translate([&] {
      ordo::CompareOptions o;
      auto kind = ordo::parse_op(op);
      if (!kind) throw ordo::Error("unknown op '" + op + "'");
      o.base.op = *kind;
      o.base.cols = cols;
      o.base.x_dtype = dtype_named(dtype);
      o.base.has_weight = ordo::forward_of(*kind) == ordo::OpKind::layer_norm || ordo::forward_of(*kind) == ordo::OpKind::rms_norm;
      o.base.has_bias = ordo::forward_of(*kind) == ordo::OpKind::layer_norm;
      o.rows = rows;
      o.seed = seed;
      o.offset = offset;
      o.scale = scale;
      o.repeats = 1;
      if (orders.empty())  // every order that has the op for this dtype (as the CLI's compare)
        for (const ordo::gen::NamedOrder& n : ordo::gen::named_orders()) {
          const std::vector<ordo::ScalarType>& dtypes = ordo::gen::dtypes_for(n, *kind);
          const bool has = std::find(n.ops.begin(), n.ops.end(), *kind) != n.ops.end() &&
                           std::find(dtypes.begin(), dtypes.end(), o.base.x_dtype) != dtypes.end();
          if (has && !n.device_only) orders.emplace_back(n.name);
        }
      o.orders = orders;
      ordo::CompareReport rep = ordo::compare_orders(o);
      py::list table;
      for (const ordo::OrderResult& r : rep.results) {
        py::dict row;
        row["order"] = r.order;
        row["error"] = r.error;
        row["max_abs_err"] = r.max_abs_err;
        row["max_ulp"] = r.max_ulp;
        py::dict same;
        for (size_t i = 0; i < r.identical.size(); ++i) same[py::str(rep.results[i].order)] = r.identical[i];
        row["identical"] = same;
        table.append(row);
      }
      return py::make_tuple(table, ordo::format_report(rep));
    });
  });
}
