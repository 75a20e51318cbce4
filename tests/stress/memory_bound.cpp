// A process that requests kernels without end stays bounded (issue 51): past the request cache's
// capacity, dropped kernels release their machine code (JIT code, cuda-emu shared objects) and
// the memory they ran in.
//
// Requests `--cpu N` distinct CPU kernels (rms_norm and layer_norm `fast`, one row length each,
// each run once) and `--emu M` distinct cuda-emu kernels (torch-cuda-tree layer_norm with
// N % 4 != 0: 512 fibers per block, the launch whose fiber stacks once stayed allocated per
// loaded library), with the cache's capacity at `--capacity C`, the disk cache off. Memory is
// sampled after a warm-up (the first third of each phase's requests, or 2C up to half), and again at
// the end: the process fails if resident memory, or the C heap in use, grew by more than
// `--bound-mib` between the two samples. With the cache unbounded (`--capacity 1000000`) the
// default run fails: measured on an Intel Xeon, resident memory grew by 214 MiB and the heap by
// 107 MiB over 1,500 CPU kernels (about 140 KiB of resident memory each), where the bounded run
// stays within 0.1 MiB after its warm-up.
//
// Usage: stress_memory_bound [--cpu N] [--emu M] [--capacity C] [--bound-mib B]
#include <fmt/format.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "ir/error.hpp"
#include "ordo/compare.hpp"
#include "ordo/ordo.hpp"

using namespace ordo;

namespace {

struct Memory {
  double rss_mib = 0, heap_mib = 0;
};

Memory sample() {
  Memory m;
  std::ifstream statm("/proc/self/statm");
  long long pages = 0, resident = 0;
  statm >> pages >> resident;
  m.rss_mib = static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
  const struct mallinfo2 mi = mallinfo2();  // every arena's bytes in use, and mmapped chunks
  m.heap_mib = static_cast<double>(mi.uordblks + mi.hblkhd) / (1 << 20);
  return m;
}

// Compiles and runs request `i` of a phase.
void request_cpu(int i) {
  Request r;
  r.op = i % 2 ? OpKind::layer_norm : OpKind::rms_norm;
  r.cols = 64 + i / 2;  // distinct rows lengths: distinct kernels
  r.order = "fast";
  KernelHandle k = compile(r);
  HostBuffers b = make_buffers(*k, 2, static_cast<uint64_t>(i), 0.0, 1.0);
  k->run(b.refs(2, r.cols), 2);
}

void request_emu(int i) {
  Request r;
  r.op = OpKind::layer_norm;
  r.cols = 4 * (40 + i) + 1;  // N % 4 != 0: torch-cuda-tree's 512-thread path
  r.order = "torch-cuda-tree";
  r.target = Target::cuda_emu;
  KernelHandle k = compile(r);
  HostBuffers b = make_buffers(*k, 2, static_cast<uint64_t>(i), 0.0, 1.0);
  k->run(b.refs(2, r.cols), 2);
}

// Runs `count` requests; returns whether memory stayed within `bound_mib` after the warm-up.
bool phase(const char* name, int count, int warmup, double bound_mib, void (*request)(int)) {
  Memory warm;
  for (int i = 0; i < count; ++i) {
    if (i == warmup) warm = sample();
    request(i);
  }
  const Memory end = sample();
  const double rss = end.rss_mib - warm.rss_mib, heap = end.heap_mib - warm.heap_mib;
  const CacheStats s = cache_stats();
  const bool ok = rss <= bound_mib && heap <= bound_mib;
  fmt::print("{}: {} distinct kernels, cache capacity {} ({} held, {} dropped so far); after request {}: RSS {:.1f} MiB, heap {:.1f} MiB; "
             "at the end: RSS {:.1f} MiB ({:+.1f}), heap {:.1f} MiB ({:+.1f}); bound {:.0f} MiB: {}\n",
             name, count, s.capacity, s.entries, s.evictions, warmup, warm.rss_mib, warm.heap_mib, end.rss_mib, rss,
             end.heap_mib, heap, bound_mib, ok ? "ok" : "GREW PAST THE BOUND");
  return ok;
}

int whole(const char* flag, const char* v) {
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (!*v || *end || n < 0 || n > 1000000) throw Error(fmt::format("{} {}: expected a whole number in [0, 1000000]", flag, v));
  return static_cast<int>(n);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int cpu = 1500, emu = 96, capacity = 32, bound = 24;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (i + 1 >= argc) throw Error(fmt::format("{} needs a value", a));
      const char* v = argv[++i];
      if (a == "--cpu") cpu = whole("--cpu", v);
      else if (a == "--emu") emu = whole("--emu", v);
      else if (a == "--capacity") capacity = whole("--capacity", v);
      else if (a == "--bound-mib") bound = whole("--bound-mib", v);
      else throw Error(fmt::format("unknown option {} (known: --cpu, --emu, --capacity, --bound-mib)", a));
    }
    if (capacity < 1) throw Error("--capacity must be at least 1");
    setenv("ORDO_CACHE", "0", 1);  // every kernel is compiled and loaded here
    set_kernel_cache_capacity(static_cast<size_t>(capacity));
    bool ok = true;
    // The warm-up: a third of the requests, or twice the capacity if that is more (up to half).
    auto warmup = [capacity](int count) { return std::max(count / 3, std::min(2 * capacity, count / 2)); };
    if (cpu > 0) ok &= phase("cpu", cpu, warmup(cpu), bound, request_cpu);
    if (emu > 0) ok &= phase("cuda-emu", emu, warmup(emu), bound, request_emu);
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "stress_memory_bound: {}\n", e.what());
    return 2;
  }
}
