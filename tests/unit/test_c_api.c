/* The C API, from C: a kernel requested, described, run and released; the JIT result equals
 * the interpreter's bit for bit; and each kind of bad call returns an error code with a message
 * naming the bad value, without crashing. Exit status 0 means every check passed. */
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "ordo/ordo.h"

static int failures = 0;

#define CHECK(cond, ...)                                  \
  do {                                                    \
    if (!(cond)) {                                        \
      fprintf(stderr, "FAIL line %d: ", __LINE__);        \
      fprintf(stderr, __VA_ARGS__);                       \
      fprintf(stderr, " (last error: %s)\n", ordo_last_error()); \
      ++failures;                                         \
    }                                                     \
  } while (0)

enum { ROWS = 5, COLS = 37 };

static ordo_kernel* layer_norm(const char* target) {
  ordo_request* r = ordo_request_new("layer_norm");
  CHECK(r != NULL, "request_new");
  CHECK(ordo_request_set(r, "cols", "37") == ORDO_OK, "set cols");
  CHECK(ordo_request_set(r, "order", "torch1.13-cpu-avx2") == ORDO_OK, "set order");
  CHECK(ordo_request_set(r, "target", target) == ORDO_OK, "set target");
  ordo_kernel* k = ordo_compile(r);
  ordo_request_free(r);
  return k;
}

/* Runs k on a fixed input; writes y into out. */
static int run(const ordo_kernel* k, float* y_out) {
  static float x[ROWS * COLS], w[COLS], b[COLS], mean[ROWS], rstd[ROWS];
  for (int i = 0; i < ROWS * COLS; ++i) x[i] = (float)((i * 7919) % 113) / 17.0f - 3.0f;
  for (int j = 0; j < COLS; ++j) {
    w[j] = 1.0f + (float)j / 64.0f;
    b[j] = (float)j / 128.0f;
  }
  void* bufs[6] = {x, w, b, y_out, mean, rstd};
  int64_t lens[6] = {ROWS * COLS, COLS, COLS, ROWS * COLS, ROWS, ROWS};
  return ordo_kernel_run(k, bufs, lens, ROWS, 0);
}

int main(void) {
  ordo_kernel* jit = layer_norm("cpu");
  ordo_kernel* spec = layer_norm("interpreter");
  CHECK(jit && spec, "compile");
  if (!jit || !spec) return 1;

  /* The argument list describes the kernel. */
  CHECK(ordo_kernel_num_args(jit) == 6, "6 arguments, got %d", ordo_kernel_num_args(jit));
  const char* name = NULL;
  int dtype = -1, is_output = -1, extent = -1;
  CHECK(ordo_kernel_arg(jit, 3, &name, &dtype, &is_output, &extent) == ORDO_OK, "arg 3");
  CHECK(name && strcmp(name, "y") == 0 && dtype == ORDO_F32 && is_output == 1 && extent == ORDO_EXTENT_ROWS_BY_COLS,
        "arg 3 is y, f32, output, rows*N (got %s %d %d %d)", name ? name : "(null)", dtype, is_output, extent);
  CHECK(ordo_kernel_arg(jit, 5, &name, NULL, NULL, &extent) == ORDO_OK && strcmp(name, "rstd") == 0 && extent == ORDO_EXTENT_ROWS,
        "arg 5 is rstd");

  /* JIT and interpreter agree bit for bit. */
  static float y_jit[ROWS * COLS], y_spec[ROWS * COLS];
  CHECK(run(jit, y_jit) == ORDO_OK, "run jit");
  CHECK(run(spec, y_spec) == ORDO_OK, "run interpreter");
  CHECK(memcmp(y_jit, y_spec, sizeof y_jit) == 0, "JIT output equals the interpreter's");
  CHECK(y_jit[0] != 0.0f, "the kernel wrote y");

  /* Errors: a code, a message naming the bad value, and no crash. */
  CHECK(ordo_request_new("layer_nrom") == NULL && strstr(ordo_last_error(), "layer_nrom"), "unknown op");
  ordo_request* r = ordo_request_new("softmax");
  CHECK(ordo_request_set(r, "colz", "8") == ORDO_ERROR_INVALID && strstr(ordo_last_error(), "colz"), "unknown key");
  CHECK(ordo_request_set(r, "cols", "8x") == ORDO_ERROR_INVALID && strstr(ordo_last_error(), "8x"), "bad integer");
  CHECK(ordo_request_set(r, "cols", "8") == ORDO_OK, "cols");
  /* 2^32 + 1 would be 1 once narrowed to int: it must be rejected, not wrapped into range. */
  CHECK(ordo_request_set(r, "rows_in_flight", "4294967297") == ORDO_ERROR_INVALID &&
            strcmp(ordo_last_error(), "rows_in_flight: 4294967297 outside [0, 16]") == 0,
        "rows_in_flight past INT_MAX (got '%s')", ordo_last_error());
  CHECK(ordo_request_set(r, "order", "no-such-order") == ORDO_OK, "order is checked at compile");
  CHECK(ordo_compile(r) == NULL && strstr(ordo_last_error(), "no-such-order"), "unknown order");
  CHECK(ordo_request_set(r, "order", "torch1.13-cpu-avx2") == ORDO_OK, "order");
  ordo_kernel* sm = ordo_compile(r);
  CHECK(sm != NULL, "softmax compiles");
  ordo_request_free(r);
  float x[16], y[16];
  for (int i = 0; i < 16; ++i) x[i] = (float)i;
  void* bufs[2] = {x, y};
  int64_t wrong[2] = {16, 15};
  CHECK(ordo_kernel_run(sm, bufs, wrong, 2, 1) == ORDO_ERROR_INVALID && strstr(ordo_last_error(), "15"), "wrong length");
  int64_t right[2] = {16, 16};
  CHECK(ordo_kernel_run(sm, bufs, right, 2, 1) == ORDO_OK, "softmax runs");
  /* softmax(0..7)[7] = 1 / sum_k e^-k = 0.63233... */
  CHECK(y[7] > 0.6323f && y[7] < 0.6324f, "softmax of 0..7 ends in 0.6323 (got %g)", (double)y[7]);
  CHECK(ordo_kernel_run(NULL, bufs, right, 2, 1) == ORDO_ERROR_INVALID, "NULL kernel");
  CHECK(ordo_kernel_arg(sm, 9, &name, NULL, NULL, NULL) == ORDO_ERROR_INVALID && strstr(ordo_last_error(), "9"), "arg out of range");

  /* attention through the C API: one head, every query attends to two keys with equal scores
   * (q = 0), so out is the mean of the two value rows. */
  ordo_request* ar = ordo_request_new("attention");
  CHECK(ar && ordo_request_set(ar, "cols", "8") == ORDO_OK && ordo_request_set(ar, "seq_q", "3") == ORDO_OK &&
            ordo_request_set(ar, "seq_k", "2") == ORDO_OK && ordo_request_set(ar, "order", "exact-tiled") == ORDO_OK,
        "attention request");
  CHECK(ordo_request_set(ar, "scale", "x1") == ORDO_ERROR_INVALID && strstr(ordo_last_error(), "x1"), "bad scale");
  ordo_kernel* at = ordo_compile(ar);
  CHECK(at != NULL, "attention compiles: %s", ordo_last_error());
  ordo_request_free(ar);
  if (at) {
    int64_t n[4];
    for (int i = 0; i < 4; ++i) CHECK(ordo_kernel_arg_elements(at, i, 1, &n[i]) == ORDO_OK, "elements of arg %d", i);
    CHECK(n[0] == 24 && n[1] == 16 && n[2] == 16 && n[3] == 24, "q, k, v, out elements 24 16 16 24 (got %lld %lld %lld %lld)",
          (long long)n[0], (long long)n[1], (long long)n[2], (long long)n[3]);
    float q[24] = {0}, kk[16], v[16], o[24];
    for (int i = 0; i < 16; ++i) {
      kk[i] = (float)i;
      v[i] = i < 8 ? 1.0f : 3.0f;
    }
    void* ab[4] = {q, kk, v, o};
    CHECK(ordo_kernel_run(at, ab, n, 1, 1) == ORDO_OK, "attention runs");
    CHECK(o[0] == 2.0f && o[23] == 2.0f, "out is the mean of the value rows (got %g, %g)", (double)o[0], (double)o[23]);
    ordo_kernel_release(at);
  }

  /* Grouped-query attention_backward: 4 query heads per K/V head, so a row (one (batch, K/V head))
   * holds 4 heads of q, out, dout, lse and dq and one of k, v, dk and dv. */
  ordo_request* gr = ordo_request_new("attention_backward");
  CHECK(gr && ordo_request_set(gr, "cols", "8") == ORDO_OK && ordo_request_set(gr, "seq_q", "3") == ORDO_OK &&
            ordo_request_set(gr, "seq_k", "2") == ORDO_OK && ordo_request_set(gr, "heads", "4") == ORDO_OK &&
            ordo_request_set(gr, "kv_group", "4") == ORDO_OK && ordo_request_set(gr, "order", "torch2.15-cpu-avx2(mkl=amd)") == ORDO_OK,
        "grouped-query attention_backward request: %s", ordo_last_error());
  ordo_kernel* gk = ordo_compile(gr);
  CHECK(gk != NULL, "grouped-query attention_backward compiles: %s", ordo_last_error());
  if (gk) {
    int64_t q_elements = 0, k_elements = 0;
    CHECK(ordo_kernel_arg_elements(gk, 0, 1, &q_elements) == ORDO_OK && ordo_kernel_arg_elements(gk, 1, 1, &k_elements) == ORDO_OK &&
              q_elements == 4 * 3 * 8 && k_elements == 2 * 8,
          "a row holds 4 query heads (q 96 elements) and one K/V head (k 16): got %lld, %lld", (long long)q_elements, (long long)k_elements);
    ordo_kernel_release(gk);
  }
  CHECK(ordo_request_set(gr, "order", "fast") == ORDO_OK && ordo_compile(gr) == NULL &&
            strstr(ordo_last_error(), "no grouped-query attention_backward (kv_group = 4)"),
        "fast refuses the group by name: %s", ordo_last_error());
  ordo_request_free(gr);

  /* An attention mask [B, 1, S_q, S_k] (a batch's heads share it): the input "mask" after q, k and v,
   * one S_q*S_k block per batch of 2 heads, so 4 rows (2 batches) take 2 blocks. A malformed
   * mask is refused where it is set, naming the value. */
  ordo_request* mr = ordo_request_new("attention");
  CHECK(mr && ordo_request_set(mr, "cols", "8") == ORDO_OK && ordo_request_set(mr, "seq_q", "3") == ORDO_OK &&
            ordo_request_set(mr, "seq_k", "5") == ORDO_OK && ordo_request_set(mr, "heads", "2") == ORDO_OK &&
            ordo_request_set(mr, "mask", "bf16:B1QK") == ORDO_OK && ordo_request_set(mr, "dtype", "bf16") == ORDO_OK &&
            ordo_request_set(mr, "order", "torch2.15-cpu-avx2(mkl=amd)") == ORDO_OK,
        "masked attention request: %s", ordo_last_error());
  ordo_kernel* mk = ordo_compile(mr);
  CHECK(mk != NULL, "masked attention compiles: %s", ordo_last_error());
  if (mk) {
    const char* mask_name = NULL;
    int mask_dtype = -1, mask_out = -1, mask_extent = -1;
    int64_t mask_elements = 0;
    CHECK(ordo_kernel_arg(mk, 3, &mask_name, &mask_dtype, &mask_out, &mask_extent) == ORDO_OK && strcmp(mask_name, "mask") == 0 &&
              mask_dtype == ORDO_BF16 && mask_out == 0 && mask_extent == ORDO_EXTENT_ROW_GROUPS,
          "argument 3 is the bf16 input mask with a block per group of rows: %s", ordo_last_error());
    CHECK(ordo_kernel_arg_elements(mk, 3, 4, &mask_elements) == ORDO_OK && mask_elements == 2 * 3 * 5,
          "4 rows of 2 heads: 2 blocks of 15 (got %lld)", (long long)mask_elements);
    ordo_kernel_release(mk);
  }
  CHECK(ordo_request_set(mr, "mask", "f32:B1Q") == ORDO_ERROR_INVALID && strstr(ordo_last_error(), "'f32:B1Q'"),
        "a malformed mask is refused by value: %s", ordo_last_error());
  ordo_request_free(mr);

  /* cross_entropy: int64 class indices in; 3 rows of 4 equal logits, row 1 ignored (ignore_index 7):
   * each counted row's loss is log(4), its log_softmax -log(4) everywhere, so the mean is log(4) and
   * total_weight 2. reduction "avg" is refused by value. */
  ordo_request* cr = ordo_request_new("cross_entropy");
  CHECK(cr && ordo_request_set(cr, "cols", "4") == ORDO_OK && ordo_request_set(cr, "order", "torch2.15-cpu-default") == ORDO_OK &&
            ordo_request_set(cr, "ignore_index", "7") == ORDO_OK && ordo_request_set(cr, "reduction", "mean") == ORDO_OK,
        "cross_entropy request: %s", ordo_last_error());
  CHECK(ordo_request_set(cr, "reduction", "avg") == ORDO_ERROR_INVALID && strstr(ordo_last_error(), "'avg'"),
        "a reduction that is not mean, sum or none is refused by value: %s", ordo_last_error());
  ordo_kernel* ck = ordo_compile(cr);
  CHECK(ck != NULL, "cross_entropy compiles: %s", ordo_last_error());
  if (ck) {
    const char* tname = NULL;
    int tdtype = -1, tout = -1, textent = -1;
    CHECK(ordo_kernel_num_args(ck) == 5 && ordo_kernel_arg(ck, 1, &tname, &tdtype, &tout, &textent) == ORDO_OK &&
              strcmp(tname, "target") == 0 && tdtype == ORDO_I64 && tout == 0 && textent == ORDO_EXTENT_ROWS,
          "x, target (int64, one per row), logp, loss, total_weight: %s", ordo_last_error());
    float logits[12], logp[12], loss = 0, total = 0;
    for (int i = 0; i < 12; ++i) logits[i] = 0.25f;
    int64_t target[3] = {2, 7, 0};
    void* cb[5] = {logits, target, logp, &loss, &total};
    int64_t clens[5] = {12, 3, 12, 1, 1};
    CHECK(ordo_kernel_run(ck, cb, clens, 3, 1) == ORDO_OK, "cross_entropy runs: %s", ordo_last_error());
    CHECK(total == 2.0f && fabsf(loss - 1.3862944f) < 1e-6f && fabsf(logp[5] + 1.3862944f) < 1e-6f,
          "loss log(4) over 2 counted rows (got loss %g, total_weight %g, logp %g)", (double)loss, (double)total, (double)logp[5]);
    ordo_kernel_release(ck);
  }
  ordo_request_free(cr);

  /* A backward op: two kernels behind one handle (dx over the rows, then the weight gradients
   * over the columns). dy = 1 everywhere: dbias is the row count, and with weight 1 the row sums
   * of dx vanish up to rounding. */
  ordo_request* br = ordo_request_new("layer_norm_backward");
  CHECK(br != NULL, "layer_norm_backward request");
  CHECK(ordo_request_set(br, "cols", "8") == ORDO_OK && ordo_request_set(br, "order", "batch-invariant") == ORDO_OK, "set");
  ordo_kernel* bk = ordo_compile(br);
  CHECK(bk != NULL, "layer_norm_backward compiles: %s", ordo_last_error());
  ordo_request_free(br);
  if (bk) {
    CHECK(ordo_kernel_num_args(bk) == 8, "dy, x, weight, mean, rstd, dx, dweight, dbias: got %d", ordo_kernel_num_args(bk));
    float dy[24], xs[24], w[8], mean[3] = {3.5f, 3.5f, 3.5f}, rstd[3] = {0.5f, 0.5f, 0.5f}, dx[24], dw[8], db[8];
    for (int i = 0; i < 24; ++i) {
      dy[i] = 1.0f;
      xs[i] = (float)(i % 8);
    }
    for (int i = 0; i < 8; ++i) w[i] = 1.0f;
    void* bb[8] = {dy, xs, w, mean, rstd, dx, dw, db};
    int64_t lens[8] = {24, 24, 8, 3, 3, 24, 8, 8};
    CHECK(ordo_kernel_run(bk, bb, lens, 3, 1) == ORDO_OK, "layer_norm_backward runs: %s", ordo_last_error());
    CHECK(db[0] == 3.0f && db[7] == 3.0f, "dbias = 3 rows of dy = 1 (got %g, %g)", (double)db[0], (double)db[7]);
    CHECK(dw[0] == -5.25f && dw[7] == 5.25f, "dweight = 3 * (x - 3.5) * 0.5 (got %g, %g)", (double)dw[0], (double)dw[7]);
    CHECK(dx[0] == 0.0f && dx[23] == 0.0f, "dx of a constant dy is 0 (got %g, %g)", (double)dx[0], (double)dx[23]);
    ordo_kernel_release(bk);
  }

  /* Attention with S_k at launch: one kernel, run at two key lengths; each equals the kernel built
   * for that S_k (one head, D = 8, one query: q . k of every key is 8, so the output is v's mean). */
  ordo_request* lr = ordo_request_new("attention");
  CHECK(ordo_request_set(lr, "cols", "8") == ORDO_OK && ordo_request_set(lr, "seq_q", "1") == ORDO_OK &&
            ordo_request_set(lr, "seq_k", "launch") == ORDO_OK && ordo_request_set(lr, "order", "fast") == ORDO_OK,
        "attention request with seq_k launch: %s", ordo_last_error());
  ordo_kernel* ak = ordo_compile(lr);
  CHECK(ak != NULL, "attention with S_k at launch compiles: %s", ordo_last_error());
  if (ak) {
    CHECK(ordo_kernel_num_sizes(ak) == 1 && strcmp(ordo_kernel_size_name(ak, 0), "S_k") == 0, "one size argument, S_k");
    float q[8], keys[8 * 5], values[8 * 5], out[8];
    for (int i = 0; i < 8; ++i) q[i] = 1.0f;
    for (int i = 0; i < 40; ++i) {
      keys[i] = 1.0f;
      values[i] = (float)(i / 8);
    }
    void* ab[4] = {q, keys, values, out};
    for (int64_t sk = 3; sk <= 5; sk += 2) {
      int64_t n = 0;
      CHECK(ordo_kernel_arg_elements_sized(ak, 1, 1, &sk, 1, &n) == ORDO_OK && n == 8 * sk, "k holds 8 x S_k elements (got %lld)",
            (long long)n);
      int64_t alens[4] = {8, 8 * sk, 8 * sk, 8};
      CHECK(ordo_kernel_run_sized(ak, ab, alens, 1, &sk, 1, 1) == ORDO_OK, "runs with S_k = %lld: %s", (long long)sk, ordo_last_error());
      /* Every key scores alike, so out is the mean of v's rows 0 .. S_k-1: (S_k - 1) / 2. */
      CHECK(out[0] == (float)(sk - 1) / 2.0f && out[7] == out[0], "S_k = %lld: out = %g", (long long)sk, (double)out[0]);
    }
    CHECK(ordo_kernel_run(ak, ab, (int64_t[]){8, 40, 40, 8}, 1, 1) == ORDO_ERROR_INVALID && strstr(ordo_last_error(), "S_k"),
          "running without the size names it: %s", ordo_last_error());
    ordo_kernel_release(ak);
  }
  ordo_request_free(lr);

  /* Executors: an unknown name is refused; OpenMP needs a loaded libgomp, which this program has not. */
  CHECK(ordo_set_executor("tbb") == ORDO_ERROR_INVALID && strstr(ordo_last_error(), "pool or openmp"), "executor tbb refused: %s",
        ordo_last_error());
  CHECK(ordo_set_executor("openmp") == ORDO_ERROR_INVALID && strstr(ordo_last_error(), "libgomp"), "executor openmp without libgomp: %s",
        ordo_last_error());
  CHECK(ordo_set_executor("pool") == ORDO_OK, "executor pool: %s", ordo_last_error());

  /* softmax with N at launch: one kernel, rows of 3 and of 7 equal values give 1/3 and 1/7 each;
   * an order built for one N fails to compile, naming why. */
  ordo_request* nr = ordo_request_new("softmax");
  CHECK(ordo_request_set(nr, "cols", "launch") == ORDO_OK && ordo_request_set(nr, "order", "fast") == ORDO_OK,
        "softmax request with cols launch: %s", ordo_last_error());
  ordo_kernel* nk = ordo_compile(nr);
  CHECK(nk != NULL, "softmax with N at launch compiles: %s", ordo_last_error());
  if (nk) {
    CHECK(ordo_kernel_num_sizes(nk) == 1 && strcmp(ordo_kernel_size_name(nk, 0), "N") == 0, "one size argument, N");
    float xs[14], ys[14];
    for (int i = 0; i < 14; ++i) xs[i] = 0.5f;
    void* nb[2] = {xs, ys};
    for (int64_t n = 3; n <= 7; n += 4) {
      int64_t e = 0;
      CHECK(ordo_kernel_arg_elements_sized(nk, 1, 2, &n, 1, &e) == ORDO_OK && e == 2 * n, "y holds rows x N elements (got %lld)",
            (long long)e);
      int64_t nlens[2] = {2 * n, 2 * n};
      CHECK(ordo_kernel_run_sized(nk, nb, nlens, 2, &n, 1, 1) == ORDO_OK, "runs with N = %lld: %s", (long long)n, ordo_last_error());
      CHECK(ys[0] == 1.0f / (float)n && ys[2 * n - 1] == ys[0], "N = %lld: y = %g", (long long)n, (double)ys[0]);
    }
    const int64_t zero = 0;
    CHECK(ordo_kernel_arg_elements_sized(nk, 0, 2, &zero, 1, NULL) == ORDO_ERROR_INVALID && strstr(ordo_last_error(), "N = 0"),
          "N = 0 is refused: %s", ordo_last_error());
    ordo_kernel_release(nk);
  }
  ordo_request_free(nr);
  nr = ordo_request_new("layer_norm");
  CHECK(ordo_request_set(nr, "cols", "launch") == ORDO_OK && ordo_request_set(nr, "order", "inductor2.15-cpu-avx2") == ORDO_OK,
        "layer_norm request: %s", ordo_last_error());
  CHECK(ordo_compile(nr) == NULL && strstr(ordo_last_error(), "for one N") && ordo_last_error_code() == ORDO_ERROR_FIXED_LENGTH,
        "Inductor's layer_norm builds for one N (ORDO_ERROR_FIXED_LENGTH): %s", ordo_last_error());
  CHECK(ordo_request_set(nr, "order", "no-such-order") == ORDO_OK && ordo_compile(nr) == NULL &&
            ordo_last_error_code() == ORDO_ERROR_INVALID,
        "an unknown order is ORDO_ERROR_INVALID: %s", ordo_last_error());
  ordo_request_free(nr);

  ordo_kernel_release(sm);
  ordo_kernel_release(jit);
  ordo_kernel_release(spec);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("C API: all checks passed\n");
  return 0;
}
