// Several processes, each with several threads, share one disk-cache directory and ask for the
// same new kernels at the same moment. scripts/hardening runs this under ThreadSanitizer (every
// process is instrumented); the normal suite runs it too.
//
// What must hold (include/ordo/disk_cache.hpp, src/runtime.cpp):
//  * Across all processes, each distinct request is compiled by LLVM exactly once: the process
//    that takes a key's lock first compiles and stores it, every other one waits and loads it
//    (CompiledKernel::from_disk_cache). Within a process the in-memory cache already makes one
//    kernel per request.
//  * Every thread of every process gets a working kernel: its outputs equal, bit for bit (NaN
//    equal to NaN), those of the same request on Target::interpreter.
//  * The directory ends with one entry per request and no temporary file.
//
// Usage: stress_cache_processes [PROCESSES]. The program runs itself as the children
// (`stress_cache_processes child GO_FILE`), each with a fresh ORDO_CACHE_DIR shared by all.
#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ordo/compare.hpp"
#include "ordo/ordo.hpp"

extern char** environ;

namespace {

using namespace ordo;
namespace fs = std::filesystem;

constexpr int kThreadsPerProcess = 4;

Request make_request(OpKind op, const char* order, ScalarType dtype, int64_t cols) {
  Request r;
  r.op = op;
  r.order = order;
  r.x_dtype = dtype;
  r.cols = cols;
  r.has_weight = op == OpKind::layer_norm || op == OpKind::rms_norm;
  r.has_bias = op == OpKind::layer_norm;
  return r;
}

// Every op, reference and parameterized orders, each storage type.
const std::vector<Request>& requests() {
  static const std::vector<Request> rs = {
      make_request(OpKind::layer_norm, "fast", ScalarType::f32, 1000),
      make_request(OpKind::layer_norm, "torch1.13-cpu-avx2", ScalarType::bf16, 515),
      make_request(OpKind::softmax, "online", ScalarType::f32, 777),
      make_request(OpKind::var_mean, "two-pass-pairwise", ScalarType::f32, 1031),
      make_request(OpKind::rms_norm, "fast", ScalarType::f16, 300),
      make_request(OpKind::log_softmax, "torch1.13-cpu-default", ScalarType::f32, 129),
  };
  return rs;
}

constexpr int64_t kRows = 3;

std::vector<std::vector<uint8_t>> run_outputs(const CompiledKernel& k) {
  HostBuffers h = make_buffers(k, kRows, 11, 0.25, 2.0);
  k.run(h.refs(kRows, k.request().cols), kRows);
  std::vector<std::vector<uint8_t>> outs;
  for (size_t i = 0; i < h.args.size(); ++i)
    if (h.args[i].output) outs.push_back(std::move(h.bytes[i]));
  return outs;
}

bool same(const CompiledKernel& k, const std::vector<std::vector<uint8_t>>& a, const std::vector<std::vector<uint8_t>>& b) {
  size_t o = 0;
  for (const ArgSpec& arg : k.args()) {
    if (!arg.output) continue;
    if (a[o].size() != b[o].size() ||
        count_identical(arg.dtype, a[o], b[o]) != static_cast<int64_t>(a[o].size()) / size_bytes(arg.dtype))
      return false;
    ++o;
  }
  return true;
}

// A child: waits for the go file, then kThreadsPerProcess threads each compile every request in
// their own order and check what they get. Prints "compiled C loaded L wrong W errors E".
int child(const std::string& go_file) {
  std::vector<std::vector<std::vector<uint8_t>>> want;
  for (Request r : requests()) {
    r.target = Target::interpreter;
    want.push_back(run_outputs(*compile_uncached(r)));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(go_file)) {
    if (std::chrono::steady_clock::now() > deadline) {
      fmt::print(stderr, "child {}: no go file after 120 s\n", ::getpid());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::mutex mu;
  std::vector<std::set<const CompiledKernel*>> seen(requests().size());
  std::vector<KernelHandle> kernels(requests().size());
  std::atomic<int> wrong{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreadsPerProcess; ++t)
    threads.emplace_back([&, t] {
      std::vector<size_t> order(requests().size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::mt19937 rng(static_cast<unsigned>(::getpid() * 31 + t));
      std::shuffle(order.begin(), order.end(), rng);
      for (size_t i : order) {
        try {
          KernelHandle k = compile(requests()[i]);
          if (!same(*k, run_outputs(*k), want[i])) ++wrong;
          std::lock_guard<std::mutex> lock(mu);
          seen[i].insert(k.get());
          kernels[i] = k;
        } catch (const std::exception& e) {
          ++errors;
          fmt::print(stderr, "child {}: {}\n", ::getpid(), e.what());
        }
      }
    });
  for (std::thread& t : threads) t.join();
  int compiled = 0, loaded = 0;
  for (size_t i = 0; i < requests().size(); ++i) {
    if (seen[i].size() != 1) ++errors;  // the in-memory cache gives every thread one kernel
    if (kernels[i]) (kernels[i]->from_disk_cache() ? loaded : compiled) += 1;
  }
  fmt::print("compiled {} loaded {} wrong {} errors {}\n", compiled, loaded, wrong.load(), errors.load());
  return wrong == 0 && errors == 0 ? 0 : 1;
}

int parent(const std::string& self, int processes) {
  const fs::path tmp = fs::temp_directory_path() / fmt::format("ordo_cache_processes.{}", ::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  const fs::path cache = tmp / "cache", go = tmp / "go";
  ::setenv("ORDO_CACHE_DIR", cache.c_str(), 1);
  ::setenv("ORDO_CACHE", "1", 1);
  std::vector<pid_t> pids;
  for (int p = 0; p < processes; ++p) {
    const std::string out = (tmp / fmt::format("child{}.out", p)).string();
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<std::string> args = {self, "child", go.string()};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, self.c_str(), &actions, nullptr, argv.data(), environ) != 0) {
      fmt::print(stderr, "cannot start {}\n", self);
      return 1;
    }
    posix_spawn_file_actions_destroy(&actions);
    pids.push_back(pid);
  }
  std::ofstream(go.string()) << "go\n";  // every child is running: start them together
  std::vector<std::string> failures;
  int compiled = 0, loaded = 0;
  for (int p = 0; p < processes; ++p) {
    int status = 0;
    ::waitpid(pids[static_cast<size_t>(p)], &status, 0);
    std::ifstream in(tmp / fmt::format("child{}.out", p));
    std::string line;
    std::getline(in, line);
    int c = 0, l = 0, w = 0, e = 0;
    std::istringstream fields(line);
    std::string word;
    fields >> word >> c >> word >> l >> word >> w >> word >> e;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !fields)
      failures.push_back(fmt::format("process {} (status {:#x}) reported '{}'", p, status, line));
    compiled += c;
    loaded += l;
  }
  const int distinct = static_cast<int>(requests().size());
  if (compiled != distinct)
    failures.push_back(fmt::format("{} LLVM compiles over all processes for {} distinct requests (each must compile once)", compiled, distinct));
  if (compiled + loaded != distinct * processes)
    failures.push_back(fmt::format("{} compiled + {} loaded kernels, expected {} processes x {} requests", compiled, loaded, processes, distinct));
  int entries = 0;
  for (const auto& f : fs::directory_iterator(cache)) {
    const std::string name = f.path().filename().string();
    if (f.path().extension() == ".ordo") ++entries;
    if (name.find(".tmp.") != std::string::npos) failures.push_back("temporary file left: " + name);
  }
  if (entries != distinct) failures.push_back(fmt::format("{} cache entries, expected {}", entries, distinct));
  fs::remove_all(tmp);
  for (const std::string& f : failures) fmt::print("FAIL {}\n", f);
  fmt::print("{} processes x {} threads, {} distinct requests: {} compiled, {} loaded from disk: {}\n", processes,
             kThreadsPerProcess, distinct, compiled, loaded, failures.empty() ? "ok" : "FAILED");
  return failures.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "child") return child(argv[2]);
  const int processes = argc > 1 ? std::atoi(argv[1]) : 4;
  if (processes < 1) {
    fmt::print(stderr, "usage: {} [PROCESSES >= 1]\n", argv[0]);
    return 2;
  }
  return parent(fs::canonical("/proc/self/exe").string(), processes);
}
