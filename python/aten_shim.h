// The C interface between ordo's Python module (_ordo, which does not link torch) and its ATen
// shim (libordo_aten.so, built against one torch's headers when the build finds that torch). The
// shim reads a torch tensor's storage and allocates torch tensors in C++, where the module
// otherwise asks each through Python (several attribute calls per tensor, and torch.empty_like:
// most of a small call's fixed cost). _ordo loads it with dlopen after torch is imported and
// uses it only when its torch version is the running torch's (ordo.torch checks).
#pragma once

#include <cstdint>

// Python's object type, as <Python.h> declares it, without including it here.
typedef struct _object PyObject;

extern "C" {

// Bumped when a declaration below changes: _ordo refuses a shim of another version.
constexpr int32_t kOrdoAtenShimAbi = 1;

// A tensor's element types the kernels take (others are kOrdoAtenOther).
enum OrdoAtenDtype : int32_t { kOrdoAtenF32 = 0, kOrdoAtenBF16 = 1, kOrdoAtenF16 = 2, kOrdoAtenF64 = 3, kOrdoAtenI64 = 4, kOrdoAtenOther = 99 };

// What a kernel launch needs to know of a tensor. `sizes` points into the tensor, valid while it lives.
struct OrdoAtenTensor {
  void* data;
  int64_t numel;
  const int64_t* sizes;
  int32_t ndim;
  int32_t dtype;       // OrdoAtenDtype
  int32_t cpu;         // 1: on the CPU
  int32_t contiguous;  // 1: compact row-major
};

int32_t ordo_aten_shim_abi(void);
// The torch version the shim was compiled against, as torch.__version__ names it.
const char* ordo_aten_torch_version(void);
// 0 and *out filled when obj is a torch tensor (any Tensor subclass); -1 otherwise. No Python error.
int32_t ordo_aten_tensor(PyObject* obj, OrdoAtenTensor* out);
// A new CPU tensor (a new reference): x's shape, or x's shape without its last dim when
// drop_last_dim, of `dtype`, contiguous, uninitialized, from torch's allocator. NULL with a
// Python exception set on failure. x must be a tensor (ordo_aten_tensor answered 0).
PyObject* ordo_aten_empty(PyObject* x, int32_t dtype, int32_t drop_last_dim);
}
