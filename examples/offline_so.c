/* Using an ordo kernel with no LLVM and no ordo library at run time: only the shared library
 * that `ordo build` wrote, its generated header, and libm.
 *
 *   build/bin/ordo build layer_norm --orders torch1.13-cpu-avx2 --cols 1024 -o /tmp/k/libln.so
 *   cc -O2 -I/tmp/k examples/offline_so.c -L/tmp/k -lln -lm -Wl,-rpath,/tmp/k -o /tmp/k/offline_so
 *   /tmp/k/offline_so /tmp/k/x.npy /tmp/k/y.npy      # reads x (float32 [rows, 1024]), writes y
 *
 * With no arguments it makes its own input and prints a summary. tests/unit/offline_so.py
 * builds and runs it, checks that it links no LLVM, and compares y with `ordo run` bit for bit. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libln.h"

enum { COLS = 1024 };

/* The smallest .npy reader for what this example accepts: little-endian float32, C order,
 * shape (rows, COLS). Returns the data (malloc'd) and sets *rows, or NULL with a message. */
static float* read_npy(const char* path, int64_t* rows) {
  FILE* f = fopen(path, "rb");
  if (!f) return fprintf(stderr, "%s: cannot open\n", path), NULL;
  unsigned char pre[10];
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0 || pre[6] != 1)
    return fclose(f), fprintf(stderr, "%s: not a version-1 .npy file\n", path), NULL;
  const unsigned len = pre[8] | (unsigned)pre[9] << 8;
  char* header = calloc(len + 1, 1);
  long long r = -1, c = -1;
  if (fread(header, 1, len, f) != len || !strstr(header, "'descr': '<f4'") || !strstr(header, "'fortran_order': False") ||
      sscanf(strstr(header, "'shape': (") ? strstr(header, "'shape': (") + 10 : "", "%lld, %lld", &r, &c) != 2 || c != COLS || r < 1) {
    fprintf(stderr, "%s: expected float32 C-order shape (rows, %d)\n", path, COLS);
    free(header), fclose(f);
    return NULL;
  }
  free(header);
  float* data = malloc((size_t)r * COLS * sizeof(float));
  if (fread(data, sizeof(float), (size_t)r * COLS, f) != (size_t)r * COLS) {
    fprintf(stderr, "%s: truncated\n", path);
    free(data), fclose(f);
    return NULL;
  }
  fclose(f);
  *rows = r;
  return data;
}

static int write_npy(const char* path, const float* data, int64_t rows) {
  char header[128];
  int n = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %d), }", (long long)rows, COLS);
  int padded = ((10 + n + 1 + 63) / 64) * 64 - 10; /* header + newline, total a multiple of 64 */
  memset(header + n, ' ', (size_t)(padded - n - 1));
  header[padded - 1] = '\n';
  FILE* f = fopen(path, "wb");
  if (!f) return fprintf(stderr, "%s: cannot write\n", path), 1;
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(padded & 0xff), (unsigned char)(padded >> 8)};
  int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(header, 1, (size_t)padded, f) == (size_t)padded &&
           fwrite(data, sizeof(float), (size_t)rows * COLS, f) == (size_t)rows * COLS;
  return fclose(f) != 0 || !ok ? (fprintf(stderr, "%s: write failed\n", path), 1) : 0;
}

int main(int argc, char** argv) {
  int64_t rows = 8;
  float* x = NULL;
  if (argc == 3) {
    if (!(x = read_npy(argv[1], &rows))) return 2;
  } else if (argc == 1) {
    x = malloc((size_t)rows * COLS * sizeof(float));
    for (int64_t i = 0; i < rows * COLS; ++i) x[i] = (float)sin(0.001 * (double)(i * 7919 % 100003)) * 3.0f + 1.0f;
  } else {
    fprintf(stderr, "usage: %s [x.npy y.npy]\n", argv[0]);
    return 2;
  }
  float *w = malloc(COLS * sizeof(float)), *b = malloc(COLS * sizeof(float));
  float *y = malloc((size_t)rows * COLS * sizeof(float)), *mean = malloc((size_t)rows * sizeof(float)),
        *rstd = malloc((size_t)rows * sizeof(float));
  for (int j = 0; j < COLS; ++j) w[j] = 1.0f, b[j] = 0.0f;
  void* buffers[6] = {x, w, b, y, mean, rstd};
  ordo_layer_norm_torch1_13_cpu_avx2_n1024_f32_run(buffers, rows);
  if (argc == 3) return write_npy(argv[2], y, rows);
  printf("layer_norm from the offline library: rows=%lld, row 0: mean %.6f rstd %.6f y[0] %.6f\n", (long long)rows,
         (double)mean[0], (double)rstd[0], (double)y[0]);
  return 0;
}
