#!/usr/bin/env python3
"""Where a CPU kernel's time goes, loop by loop.

  bench/perf_loops.py attention --order torch2.15-cpu --cols 64 --sq 1024 --sk 1024 --rows 8

builds the request with `ordo build` (the JIT's machine code, in a .so with symbols), calls its
`_run` from a small C driver on `--rows` rows filled with values in [-0.5, 0.5), single-threaded,
under `perf record`, then sums `perf annotate`'s samples over each loop: the instructions from a
backward jump's target to the jump. Loops nest, so an outer loop's share includes its inner ones.
Every argument after the op goes to `ordo build` as it is. Needs perf and a C compiler (cc).
`--time ROUNDS` skips perf and prints the driver's fastest time per launch instead.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# ORDO_BIN: another ordo binary (an older build's, for a before and after); this checkout's by default.
ORDO = os.environ.get("ORDO_BIN") or os.path.join(HERE, "..", "build", "bin", "ordo")

# One value per element, in [-0.5, 0.5): f32 as itself, bf16 and f16 as their 16-bit patterns.
DRIVER = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "%(header)s"
static uint16_t to_f16(float f) {  /* values in [-0.5, 0.5): normal or zero, no rounding care needed */
  _Float16 h = (_Float16)f; uint16_t u; memcpy(&u, &h, 2); return u;
}
int main(int argc, char** argv) {
  const int64_t rows = %(rows)d; const int iterations = atoi(argv[1]);
  void* buffers[%(count)d];
  const int64_t elements[] = {%(elements)s};
  const int bytes[] = {%(bytes)s};
  const int kind[] = {%(kinds)s};  /* 0 f32, 1 bf16, 2 f16 */
  for (int i = 0; i < %(count)d; ++i) {
    buffers[i] = malloc((size_t)(elements[i] ? elements[i] : 1) * bytes[i]);
    for (int64_t j = 0; j < elements[i]; ++j) {
      float v = (float)((uint32_t)(j * 2654435761u) %% 1000u) / 1000.0f - 0.5f;
      if (kind[i] == 0) ((float*)buffers[i])[j] = v;
      else if (kind[i] == 1) { uint32_t u; memcpy(&u, &v, 4); ((uint16_t*)buffers[i])[j] = (uint16_t)(u >> 16); }
      else ((uint16_t*)buffers[i])[j] = to_f16(v);
    }
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int it = 0; it < iterations; ++it)
    if (%(run)s((void* const*)buffers, rows) != 0) { fprintf(stderr, "the kernel's _run failed\n"); return 1; }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("%%.6f\n", ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec)) / iterations);
  return 0;
}
"""


def elements_of(expr, rows):
    # The manifest's forms: N, rows, rows*K, ceil(rows/B)*K.
    text = expr.replace("ceil(rows/", "-(-rows//").replace("rows", str(rows))
    if not re.fullmatch(r"[0-9*()/+\- ]+", text):
        raise SystemExit(f"an element count this script cannot read: {expr!r}")
    return int(eval(text))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("op")
    ap.add_argument("--rows", type=int, default=8, help="rows (attention: batch*heads) per launch (8)")
    ap.add_argument("--iterations", type=int, default=20, help="launches under perf (20)")
    ap.add_argument("--top", type=int, default=12, help="loops to list, by share (12)")
    ap.add_argument("--time", type=int, default=0, metavar="ROUNDS",
                    help="no perf: time --iterations launches ROUNDS times (one thread, the same driver) and print the "
                         "fastest round's seconds per launch")
    args, build_args = ap.parse_known_args()
    if args.rows < 1 or args.iterations < 1:
        raise SystemExit(f"--rows {args.rows} and --iterations {args.iterations}: each must be 1 or more")
    if args.time < 0:
        raise SystemExit(f"--time {args.time}: give a number of rounds, 1 or more (0, the default, profiles with perf)")
    if not os.path.exists(ORDO):
        raise SystemExit(f"ORDO_BIN={ORDO} does not exist" if os.environ.get("ORDO_BIN")
                         else f"{ORDO} is missing: build ordo first (scripts/setup.sh)")
    with tempfile.TemporaryDirectory() as tmp:
        lib = os.path.join(tmp, "libkernel.so")
        out = subprocess.run([ORDO, "build", args.op, *build_args, "-o", lib], capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"ordo build failed:\n{out.stderr}")
        header = os.path.join(tmp, "libkernel.h")
        with open(header) as f:
            runs = re.findall(r"static inline int (\w+_run)\(void\* const\* buffers, int64_t rows\)", f.read())
        if len(runs) != 1:
            raise SystemExit(f"expected one op in the library, found {len(runs)}: give one --order")
        with open(os.path.join(tmp, "libkernel.json")) as f:
            manifest = json.load(f)
        arguments = [a for a in manifest["kernels"][0]["args"] if not a.get("workspace")]
        sizes = {"f32": (4, 0), "bf16": (2, 1), "f16": (2, 2)}
        driver = DRIVER % {
            "header": header, "rows": args.rows, "count": len(arguments), "run": runs[0],
            "elements": ", ".join(str(elements_of(a["elements"], args.rows)) for a in arguments),
            "bytes": ", ".join(str(sizes[a["dtype"]][0]) for a in arguments),
            "kinds": ", ".join(str(sizes[a["dtype"]][1]) for a in arguments)}
        source, exe = os.path.join(tmp, "driver.c"), os.path.join(tmp, "driver")
        with open(source, "w") as f:
            f.write(driver)
        subprocess.run(["cc", "-O2", source, "-o", exe, f"-L{tmp}", "-lkernel", f"-Wl,-rpath,{tmp}", "-lm"], check=True)
        if args.time > 0:
            rounds = [float(subprocess.run([exe, str(args.iterations)], check=True, capture_output=True, text=True).stdout)
                      for _ in range(args.time)]
            print(f"{min(rounds) * 1e3:.3f} ms per launch (fastest of {args.time} rounds of {args.iterations}; "
                  f"all: {', '.join(f'{r * 1e3:.3f}' for r in rounds)})")
            return 0
        data = os.path.join(tmp, "perf.data")
        subprocess.run(["perf", "record", "-q", "-o", data, exe, str(args.iterations)], check=True, stdout=subprocess.DEVNULL)
        report = subprocess.run(["perf", "report", "-i", data, "--sort", "sym", "--stdio", "-q"], capture_output=True, text=True).stdout
        shares = {m.group(2): float(m.group(1)) for m in re.finditer(r"([0-9.]+)%\s+\[\.\]\s+(\S+)", report)}
        for kernel in manifest["kernels"]:
            name = kernel["name"]
            text = subprocess.run(["perf", "annotate", "-i", data, "--stdio", "-s", name], capture_output=True, text=True).stdout
            print(f"{name}: {shares.get(name, 0.0):.1f}% of the samples; its loops, as shares of its own samples:")
            for share, head, at, count in sorted(loops_of(text), reverse=True)[:args.top]:
                print(f"  loop {head:#x}-{at:#x}: {share:5.1f}%  ({count} instructions)")
    return 0


def loops_of(annotated):
    """(share, head, backward jump, instructions) of each loop in perf annotate's text."""
    rows = []
    for line in annotated.splitlines():
        m = re.match(r"\s+([0-9.]+)\s*:\s+([0-9a-f]+):\s+(.*)", line)
        if m:
            rows.append((float(m.group(1)), int(m.group(2), 16), m.group(3)))
    loops = []
    for _, at, instruction in rows:
        m = re.match(r"j\w+\s+([0-9a-f]+)", instruction)
        if m and int(m.group(1), 16) < at:
            head = int(m.group(1), 16)
            inside = [p for p, x, _ in rows if head <= x <= at]
            loops.append((sum(inside), head, at, len(inside)))
    return loops


if __name__ == "__main__":
    sys.exit(main())
