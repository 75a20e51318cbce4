/* ordo's C API: request a kernel, launch it, release it. For compiler backends and any
 * language with a C FFI.
 *
 *   ordo_request* r = ordo_request_new("layer_norm");
 *   ordo_request_set(r, "cols", "4096");
 *   ordo_request_set(r, "order", "torch1.13-cpu-avx2");
 *   ordo_kernel* k = ordo_compile(r);            // NULL on error: see ordo_last_error()
 *   ordo_request_free(r);
 *   void* bufs[] = {x, w, b, y, mean, rstd};    // in ordo_kernel_arg order
 *   int64_t lens[] = {rows * 4096, 4096, 4096, rows * 4096, rows, rows};
 *   ordo_kernel_run(k, bufs, lens, rows, 0);
 *   ordo_kernel_release(k);
 *
 * Conventions: functions returning int give ORDO_OK (0) or an error code; functions returning
 * a pointer give NULL on error. The message of the calling thread's last error is
 * ordo_last_error(). No C++ exception crosses this boundary. Kernels are shared: compiling the
 * same request twice returns handles to one cached kernel, and each handle is released once.
 * A kernel may be run from several threads at once. */
#ifndef ORDO_ORDO_H
#define ORDO_ORDO_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  ORDO_OK = 0,
  ORDO_ERROR_INVALID = 2, /* a bad request, argument or buffer: the caller's to fix */
  ORDO_ERROR_INTERNAL = 1, /* a bug in ordo */
  /* A request for a length at launch (cols or seq_k "launch") that the order cannot serve: it
   * builds its kernel for one length. Compile the request with the length instead. */
  ORDO_ERROR_FIXED_LENGTH = 3
};

/* Element types, as ordo names them: "f32", "bf16", "f16" (bf16 buffers hold uint16 bit patterns), and
 * int64 for cross_entropy's class indices. */
enum { ORDO_F64 = 0, ORDO_F32 = 1, ORDO_F16 = 2, ORDO_BF16 = 3, ORDO_I64 = 4 };
/* How long an argument is, for a launch over `rows` rows of N columns. */
enum {
  ORDO_EXTENT_ROWS_BY_COLS = 0,
  ORDO_EXTENT_COLS = 1,
  ORDO_EXTENT_ROWS = 2,
  ORDO_EXTENT_ROWS_BY_FIXED = 3,
  ORDO_EXTENT_FIXED = 4,      /* the same elements for every launch (attention's mask without a batch dim) */
  ORDO_EXTENT_ROW_GROUPS = 5  /* elements for each group of rows (attention's mask with a batch dim: a batch's heads) */
};

typedef struct ordo_request ordo_request;
typedef struct ordo_kernel ordo_kernel;

/* The message of this thread's most recent error ("" if none). Valid until the next ordo call
 * on this thread. */
const char* ordo_last_error(void);
/* The code of this thread's most recent error (ORDO_OK if none): what a function returning a
 * pointer (ordo_compile) cannot return itself. */
int ordo_last_error_code(void);

/* A request for `op`: layer_norm, rms_norm, var_mean, sum, mean, silu, gelu_tanh, gelu, softmax,
   log_softmax, attention, cross_entropy, or a backward op (layer_norm_backward, ...). NULL if unknown.
 * cross_entropy: x [rows, cols] logits and target [rows] int64 class indices in; logp like x, loss (one
 * element, or [rows] with reduction none) and total_weight (one element) out. cross_entropy_backward:
 * dloss, logp, target, total_weight in; dx out.
 * attention: cols is the head dim D; rows (at run time) is batch*heads; q is [rows, seq_q, D], k and v
 * [rows, seq_k, D], out like q, lse [rows, seq_q] (float32, when lse=1). */
ordo_request* ordo_request_new(const char* op);
/* Sets one field by name, with the CLI's spelling of the value:
 *   cols (N), dtype, weight_dtype, acc (f32|f64), order, eps, target (cpu|interpreter|cuda|cuda-emu),
 *   weight, bias, allow_mixed_dtypes (0|1), rows_in_flight;
 *   attention: seq_q, seq_k, heads (H of PyTorch's (B, H, S, D); rows = B*H), kv_group (attention_backward's
 *   query heads per K/V head, grouped-query: rows = B*H/kv_group, q, out, dout, lse and dq kv_group heads per
 *   row; the torch2.15-cpu orders), q_row_stride, k_row_stride,
 *   v_row_stride (the row strides of the tensors PyTorch was given; 0 or D: contiguous), causal (0|1), scale, lse (0|1),
 *   mask (none, or <dtype>:<dims>: an additive mask input "mask", PyTorch's [B, H, S_q, S_k] with each dim a letter
 *   B, H, Q, K where spanned or 1 where broadcast, f32 or the inputs' dtype, e.g. "bf16:B1QK"; the torch2.15-cpu orders),
 *   cross_entropy, cross_entropy_backward: ignore_index (the target of a row not counted; -100), reduction
 *   (mean, sum or none);
 *   seq_k "launch" (one kernel for every S_k, given to ordo_kernel_run_sized: the flash orders);
 *   cols "launch" (the row ops' forward: one kernel for every N, given to ordo_kernel_run_sized, for the
 *   orders whose reductions are the same loops at every N; the others fail to compile, saying why).
 * Values are checked when the request is compiled; an unknown key or a malformed number fails here. */
int ordo_request_set(ordo_request* r, const char* key, const char* value);
void ordo_request_free(ordo_request* r);

/* Resolves, generates, verifies and compiles (or finds in the cache). */
ordo_kernel* ordo_compile(const ordo_request* r);
void ordo_kernel_release(ordo_kernel* k);

int ordo_kernel_num_args(const ordo_kernel* k);
/* Argument i: its name ("x", "weight", "y", ...), element type, whether it is written, and its extent. */
int ordo_kernel_arg(const ordo_kernel* k, int i, const char** name, int* dtype, int* is_output, int* extent);
/* The number of elements argument i has in a launch of `rows` rows. */
int ordo_kernel_arg_elements(const ordo_kernel* k, int i, int64_t rows, int64_t* elements);
/* Runs `rows` rows. buffers[i] and elements[i] follow the argument order; each length is
 * checked against the argument's extent. threads = 0 uses every core; results never depend on it. */
int ordo_kernel_run(const ordo_kernel* k, void* const* buffers, const int64_t* elements, int64_t rows, int threads);

/* Where launches split over threads run: "pool" (ordo's own threads, the default) or "openmp" (the
 * OpenMP runtime, libgomp, already loaded in the process, as PyTorch's: ordo's kernels then run on its
 * threads). ORDO_ERROR_INVALID when no libgomp is loaded. Bits never depend on it. */
int ordo_set_executor(const char* name);

/* The lengths a kernel takes at each launch (attention's "S_k" with seq_k "launch", a row op's "N"
 * with cols "launch"): how many, and
 * the name of size i. A kernel with sizes runs through ordo_kernel_run_sized, which takes
 * sizes[0 .. num_sizes) in that order (each in [1, 2^24]); ordo_kernel_arg_elements_sized gives
 * argument i's elements for those sizes. */
int ordo_kernel_num_sizes(const ordo_kernel* k);
const char* ordo_kernel_size_name(const ordo_kernel* k, int i);
int ordo_kernel_arg_elements_sized(const ordo_kernel* k, int i, int64_t rows, const int64_t* sizes, int num_sizes, int64_t* elements);
int ordo_kernel_run_sized(const ordo_kernel* k, void* const* buffers, const int64_t* elements, int64_t rows, const int64_t* sizes,
                          int num_sizes, int threads);

#ifdef __cplusplus
}
#endif

#endif /* ORDO_ORDO_H */
