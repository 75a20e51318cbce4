// libordo_aten.so: ordo's Python module's direct access to torch tensors (python/aten_shim.h),
// compiled against one torch's headers. It links nothing of torch by path: its torch libraries
// are the ones `import torch` has loaded into the process (matched by soname), so it is loaded
// only after torch, and used only when its version is the running torch's.
#include "python/aten_shim.h"

#include <Python.h>
#include <ATen/ATen.h>
#include <torch/csrc/autograd/python_variable.h>

namespace {

int32_t to_shim(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return kOrdoAtenF32;
    case at::kBFloat16: return kOrdoAtenBF16;
    case at::kHalf: return kOrdoAtenF16;
    case at::kDouble: return kOrdoAtenF64;
    case at::kLong: return kOrdoAtenI64;
    default: return kOrdoAtenOther;
  }
}

at::ScalarType from_shim(int32_t t) {
  switch (t) {
    case kOrdoAtenF32: return at::kFloat;
    case kOrdoAtenBF16: return at::kBFloat16;
    case kOrdoAtenF16: return at::kHalf;
    case kOrdoAtenF64: return at::kDouble;
    case kOrdoAtenI64: return at::kLong;
    default: throw std::invalid_argument("ordo_aten_empty: dtype code " + std::to_string(t) + " is not one ordo allocates");
  }
}

}  // namespace

extern "C" {

int32_t ordo_aten_shim_abi(void) { return kOrdoAtenShimAbi; }

// torch.__version__ of the torch whose headers built the shim (CMakeLists.txt defines it).
const char* ordo_aten_torch_version(void) { return ORDO_TORCH_BUILT_FOR; }

int32_t ordo_aten_tensor(PyObject* obj, OrdoAtenTensor* out) {
  if (!obj || !THPVariable_Check(obj)) return -1;
  // A tensor subclass may refuse what is asked here (a fake tensor's address, a nested tensor's
  // sizes): no C++ exception crosses this C interface; the caller then asks through Python,
  // which raises torch's own error.
  try {
    const at::Tensor& t = THPVariable_Unpack(obj);
    // Undefined, or a subclass that dispatches to Python (a fake tensor): the Python path.
    if (!t.defined() || t.unsafeGetTensorImpl()->is_python_dispatch()) return -1;
    out->cpu = t.device().is_cpu() ? 1 : 0;
    out->dtype = to_shim(t.scalar_type());
    out->ndim = static_cast<int32_t>(t.dim());
    out->sizes = t.sizes().data();
    out->numel = t.numel();
    out->contiguous = t.is_contiguous() ? 1 : 0;
    // A tensor without storage (a meta tensor) has no address; the caller checks cpu first.
    out->data = out->cpu && t.has_storage() ? t.data_ptr() : nullptr;
    return 0;
  } catch (...) {
    return -1;
  }
}

PyObject* ordo_aten_empty(PyObject* x, int32_t dtype, int32_t drop_last_dim) {
  try {
    const at::Tensor& like = THPVariable_Unpack(x);
    at::IntArrayRef sizes = like.sizes();
    if (drop_last_dim && !sizes.empty()) sizes = sizes.slice(0, sizes.size() - 1);
    return THPVariable_Wrap(at::empty(sizes, at::TensorOptions().dtype(from_shim(dtype)).device(at::kCPU)));
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}
}
