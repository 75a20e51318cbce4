// ordo bench: time one kernel, next to a baseline measured in the same run.
#include "tools/cli.hpp"

#include <sys/resource.h>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include "ordo/disk_cache.hpp"
#include "ordo/compare.hpp"
#include "ordo/peak.hpp"

namespace ordo::cli {

const char* const kBenchHelp = R"(usage: ordo bench <op> --order NAME [options]

  --rows R              rows: norms 8192, attention batch*heads 8  --rows 4096
  --threads T           threads of ordo's pool (0: every core)   --threads 2
  --baseline copy       also time a copy of the same bytes       --baseline copy
  --seconds S           time budget for the timed runs (2)       --seconds 5
  --json                one JSON object                          --json
  --no-peak             attention: skip the fma peak kernel      --no-peak

examples:
  ordo bench layer_norm --order torch2.15-cpu --rows 8192 --cols 4096 --baseline copy --json
  ordo bench attention --order fast --sq 1024 --cols 64 --rows 8 --json
)";

namespace {

// The buffers as PyTorch's CPU allocator hands tensors over, each from a 64-byte boundary: a large
// std::vector starts 16 bytes past a page, and where a buffer starts decides, for one, whether
// streamed stores take x86's vector form (backends/llvm/lower.cpp). The values are `h`'s.
struct AlignedBuffers {
  std::vector<std::unique_ptr<uint8_t, void (*)(void*)>> blocks;
  std::vector<ordo::BufferRef> refs;
};
AlignedBuffers aligned_copies(ordo::HostBuffers& h, int64_t rows, int64_t cols) {
  AlignedBuffers out;
  out.refs = h.refs(rows, cols);
  for (size_t i = 0; i < h.bytes.size(); ++i) {
    const size_t size = (std::max<size_t>(h.bytes[i].size(), 1) + 63) / 64 * 64;
    auto* block = static_cast<uint8_t*>(std::aligned_alloc(64, size));
    if (!block) throw Error(fmt::format("ordo bench: cannot allocate {} bytes for buffer {}", size, h.args[i].name));
    out.blocks.emplace_back(block, std::free);
    std::memcpy(block, h.bytes[i].data(), h.bytes[i].size());
    out.refs[i].data = block;
  }
  return out;
}

// Medians of `n` compiles of r that bypass the disk cache (the caller sets ORDO_CACHE=0): the
// whole compile and its phases, in ms.
struct ColdCompiles {
  double total, lower, optimize, codegen;
};
ColdCompiles cold_compiles(const ordo::Request& r, int n) {
  std::vector<double> total, lower, optimize, codegen;
  for (int i = 0; i < n; ++i) {
    ordo::KernelHandle c = ordo::compile_uncached(r);
    total.push_back(c->compile_ms());
    lower.push_back(c->lower_ms());
    optimize.push_back(c->optimize_ms());
    codegen.push_back(c->codegen_ms());
  }
  return {median(total), median(lower), median(optimize), median(codegen)};
}

// ordo bench attention: GFLOP/s of one order (4*S_q*S_k*D flops per head, the materialized
// count; causal runs compute every score, so the same count applies), next to the machine's fma
// peak measured in this process, the cold compile, and the process's peak RSS (inputs included).
int bench_attention(const Args& a, ordo::Request r) {
  using clock = std::chrono::steady_clock;
  auto since = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
  if (!a.get("cols")) r.cols = 64;
  const int64_t rows = a.get("rows") ? parse_int("--rows", *a.get("rows"), 1, int64_t(1) << 20) : 8;
  const int threads = a.get("threads") ? static_cast<int>(parse_int("--threads", *a.get("threads"), 0, 1024)) : 0;
  const double budget = a.get("seconds") ? parse_double("--seconds", *a.get("seconds")) : 2.0;
  // A cold compile: the persistent cache is bypassed (and the environment restored).
  const std::optional<std::string> saved_cache = env("ORDO_CACHE");
  ::setenv("ORDO_CACHE", "0", 1);
  // The first compile in a process also builds LLVM's JIT and target tables; the cold compile
  // reported is the median of the later ones, as for the norms (`first_compile_ms` keeps it).
  const auto t_compile = clock::now();
  ordo::KernelHandle k = ordo::compile_uncached(r);
  const double first_compile_ms = since(t_compile) * 1e3;
  const ColdCompiles cold = cold_compiles(r, 3);
  restore_env("ORDO_CACHE", saved_cache);
  ordo::HostBuffers h = ordo::make_buffers(*k, rows, 1, 0.0, 1.0);
  const AlignedBuffers aligned = aligned_copies(h, rows, r.cols);
  const std::vector<ordo::BufferRef>& refs = aligned.refs;
  k->run(refs, rows, threads);  // warm up
  std::vector<double> ts;
  const auto start = clock::now();
  while (ts.size() < 3 || (since(start) < budget && ts.size() < 200)) {
    auto t = clock::now();
    k->run(refs, rows, threads);
    ts.push_back(since(t));
  }
  const double tmin = *std::min_element(ts.begin(), ts.end());
  // Two S_q x S_k x D products forward (q k^T, p v); the backward's five (q k^T again for P,
  // dO v^T, P^T dO, dS k, dS^T q), counting a multiply-add as 2 flops.
  const double products = r.op == ordo::OpKind::attention_backward ? 5.0 : 2.0;
  const double flops = 2.0 * products * static_cast<double>(rows) * static_cast<double>(r.seq_q) * static_cast<double>(r.seq_k) *
                       static_cast<double>(r.cols);
  const ordo::PeakFlops peak = a.flag("no-peak") ? ordo::PeakFlops{} : ordo::measure_fma_peak(threads);
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  fmt::print(
      "{{\"op\": \"{}\", \"order\": \"{}\", \"batch_heads\": {}, \"seq_q\": {}, \"seq_k\": {}, \"head_dim\": {}, "
      "\"causal\": {}, \"dtype\": \"{}\", \"threads\": {}, \"seconds_min\": {:.6g}, \"seconds_median\": {:.6g}, \"runs\": {}, "
      "\"gflops\": {:.3f}, \"peak_fma_gflops\": {}, \"fraction_of_peak\": {}, \"compile_ms_cold\": {:.3f}, "
      "\"compile_ms_phases\": {{\"lower\": {:.3f}, \"optimize\": {:.3f}, \"codegen\": {:.3f}}}, \"first_compile_ms\": {:.3f}, "
      "\"peak_rss_mb\": {:.1f}, \"input_output_mb\": {:.1f}}}\n",
      ordo::name(r.op), r.order, rows, r.seq_q, r.seq_k, r.cols, r.causal, ordo::name(r.x_dtype), threads, tmin, median(ts), ts.size(), flops / tmin / 1e9,
      peak.available ? fmt::format("{:.3f}", peak.gflops) : "null",
      peak.available ? fmt::format("{:.4f}", flops / tmin / 1e9 / peak.gflops) : "null", cold.total, cold.lower, cold.optimize,
      cold.codegen, first_compile_ms, ru.ru_maxrss / 1024.0,
      [&] {
        double b = 0;
        for (const auto& x : h.bytes) b += static_cast<double>(x.size());
        return b / (1 << 20);
      }());
  return 0;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  std::vector<std::string> values = kRequestValues;
  values.insert(values.end(), {"rows", "threads", "baseline", "seconds"});
  auto flags = kRequestFlags;
  flags.insert(flags.end(), {"json", "no-peak"});
  Args a = Args::parse(argc, argv, 2, flags, values);
  const ordo::OpKind op = parse_op_arg(a);
  ordo::Request r = request_from(a, op);
  refuse_launch_sizes(r, "bench");
  if (ordo::forward_of(op) == ordo::OpKind::attention) {
    if (!a.get("order")) throw Error("missing --order NAME");
    if (!a.flag("json")) throw Error("bench prints JSON only: add --json");
    return bench_attention(a, r);
  }
  if (r.cols == 0 && !a.get("cols")) r.cols = 4096;
  if (!a.get("order")) throw Error("missing --order NAME");
  if (!a.flag("json")) throw Error("bench prints JSON only: add --json");
  const int64_t rows = a.get("rows") ? parse_int("--rows", *a.get("rows"), 1, int64_t(1) << 24) : 8192;
  const int threads = a.get("threads") ? static_cast<int>(parse_int("--threads", *a.get("threads"), 0, 1024)) : 0;
  const double budget = a.get("seconds") ? parse_double("--seconds", *a.get("seconds")) : 2.0;
  const std::string baseline = a.get("baseline").value_or("");
  if (!baseline.empty() && baseline != "copy") throw Error(fmt::format("--baseline '{}' is not copy", baseline));
  using clock = std::chrono::steady_clock;
  auto since = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };

  // Cold compiles bypass the disk cache; disk hits read a private temporary cache directory
  // that one compile has filled. The user's environment is restored afterwards.
  const std::optional<std::string> saved_cache = env("ORDO_CACHE"), saved_dir = env("ORDO_CACHE_DIR");
  std::vector<double> disk_hit;
  ::setenv("ORDO_CACHE", "0", 1);
  const ColdCompiles cold = cold_compiles(r, 7);
  const std::filesystem::path bench_cache = std::filesystem::temp_directory_path() / fmt::format("ordo_bench_cache.{}", ::getpid());
  ::setenv("ORDO_CACHE", "1", 1);
  ::setenv("ORDO_CACHE_DIR", bench_cache.c_str(), 1);
  ordo::compile_uncached(r);  // fills the entry
  for (int i = 0; i < 7; ++i) {
    ordo::KernelHandle c = ordo::compile_uncached(r);
    if (!c->from_disk_cache()) throw Error("internal: the disk cache missed an entry it had just written");
    disk_hit.push_back(c->compile_ms());
  }
  std::error_code ec;
  std::filesystem::remove_all(bench_cache, ec);
  restore_env("ORDO_CACHE", saved_cache);
  restore_env("ORDO_CACHE_DIR", saved_dir);
  ordo::KernelHandle k = ordo::compile(r);
  const int hits = 20000;
  auto t0 = clock::now();
  for (int i = 0; i < hits; ++i) k = ordo::compile(r);
  const double hit_us = since(t0) / hits * 1e6;

  ordo::HostBuffers h = ordo::make_buffers(*k, rows, 1, 0.0, 1.0);
  const AlignedBuffers aligned = aligned_copies(h, rows, r.cols);
  const std::vector<ordo::BufferRef>& refs = aligned.refs;
  double bytes = 0;
  for (const auto& b : h.bytes) bytes += static_cast<double>(b.size());
  // With a baseline, kernel and baseline runs alternate in one loop, so both see the same
  // machine state (other load, frequency, memory traffic); each reports its fastest run.
  // The copy baseline moves the bytes of the op's row input: x, or y for the softmax backward ops.
  const bool reads_x = std::any_of(k->args().begin(), k->args().end(), [](const ordo::ArgSpec& a) { return a.name == "x"; });
  std::vector<uint8_t>& src = h.get(reads_x ? "x" : "y");
  std::vector<uint8_t> dst(baseline == "copy" ? src.size() : 0);
  const int64_t pages = static_cast<int64_t>(src.size()) / 4096;
  auto copy = [&] {
    ordo::parallel_for(pages, threads, [&](int64_t b, int64_t e) {
      std::memcpy(dst.data() + b * 4096, src.data() + b * 4096, static_cast<size_t>((e - b) * 4096));
    });
  };
  auto kernel = [&] { k->run(refs, rows, threads); };
  kernel();  // warm up: page in, first touch
  if (!baseline.empty()) copy();
  std::vector<double> ts, cs;
  auto start = clock::now();
  while (ts.size() < 5 || (since(start) < budget && ts.size() < 1000)) {
    auto t = clock::now();
    kernel();
    ts.push_back(since(t));
    if (!baseline.empty()) {
      t = clock::now();
      copy();
      cs.push_back(since(t));
    }
  }
  const double tmin = *std::min_element(ts.begin(), ts.end());
  std::string extra;
  if (!baseline.empty()) {
    // The same bytes as x copied to another buffer on the same pool: read + write.
    const double cmin = *std::min_element(cs.begin(), cs.end());
    const double copy_gbps = 2.0 * static_cast<double>(pages * 4096) / cmin / 1e9;
    extra = fmt::format(", \"copy_gbps\": {:.3f}, \"ratio_to_copy\": {:.3f}", copy_gbps, bytes / tmin / 1e9 / copy_gbps);
  }
  fmt::print(
      "{{\"op\": \"{}\", \"order\": \"{}\", \"rows\": {}, \"cols\": {}, \"dtype\": \"{}\", \"threads\": {}, "
      "\"rows_in_flight\": {}, \"bytes\": {:.0f}, \"gbps\": {:.3f}, \"seconds_min\": {:.6g}, \"seconds_median\": {:.6g}, "
      "\"runs\": {}, \"compile_ms_cold\": {:.3f}, \"compile_ms_phases\": {{\"lower\": {:.3f}, \"optimize\": {:.3f}, "
      "\"codegen\": {:.3f}}}, \"disk_cache_hit_ms\": {:.3f}, \"cache_hit_us\": {:.4f}{}}}\n",
      ordo::name(op), r.order, rows, r.cols, ordo::name(r.x_dtype), threads, k->rows_in_flight(), bytes, bytes / tmin / 1e9,
      tmin, median(ts), ts.size(), cold.total, cold.lower, cold.optimize, cold.codegen, median(disk_hit), hit_us,
      extra);
  return 0;
}

}  // namespace ordo::cli
