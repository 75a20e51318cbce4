// compile(), the in-memory kernel cache, and launching rows over a thread pool.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <dlfcn.h>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <new>
#include <optional>
#include <thread>
#include <limits>
#include <list>
#include <unordered_map>
#include <variant>

#include "backends/llvm/llvm_backend.hpp"
#include "gen/gen.hpp"
#include "ir/error.hpp"
#include "ir/interpret.hpp"
#include "ordo/disk_cache.hpp"
#include "ordo/ordo.hpp"
#include "src/backend.hpp"
#include "src/kernel_parts.hpp"

namespace ordo {

namespace {

// A fixed pool; parallel_for splits [0, n) into contiguous blocks, one per thread.
//
// Waiting threads spin for a while before they sleep: workers for the next launch, the launching
// thread for the workers' blocks. Waking a thread blocked on a condition variable took about 65 µs
// here (Intel Xeon, 2 cores: a 16x4096 layer_norm ran in 15 µs on one thread and 79 µs split over
// two), so without the spin a launch split between threads lost to running it on one up to
// 256x4096. OpenMP, under which torch's own ops run, spins the same way by default.
class Pool {
 public:
  static Pool& instance() {
    static Pool p;
    return p;
  }
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void parallel_for(int64_t n, int threads, const std::function<void(int64_t, int64_t)>& fn) {
    threads = std::max(1, std::min<int>(threads <= 0 ? size() : threads, size()));
    if (threads == 1 || n < 2) return fn(0, n);
    std::lock_guard<std::mutex> one_job(job_mu_);  // launches from several threads queue up here
    std::vector<std::function<void()>> tasks;
    const int64_t per = (n + threads - 1) / threads;
    for (int t = 1; t < threads; ++t) {
      int64_t b = std::min(n, t * per), e = std::min(n, (t + 1) * per);
      if (b < e) tasks.push_back([&fn, b, e] { fn(b, e); });
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.store(static_cast<int>(tasks.size()), std::memory_order_relaxed);
      for (auto& t : tasks) queue_.push_back(std::move(t));
      queued_.store(static_cast<int>(queue_.size()), std::memory_order_release);
    }
    cv_.notify_all();
    fn(0, std::min(n, per));
    spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; });
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
  }

  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

 private:
  // How long a waiting thread spins before it sleeps.
  static constexpr std::chrono::microseconds kSpin{200};

  // Returns when done() holds, or after kSpin.
  template <class Done>
  static void spin_until(Done done) {
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (int i = 1; !done(); ++i) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      if (i % 64 == 0 && std::chrono::steady_clock::now() > until) return;
    }
  }

  Pool() {
    unsigned n = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 1; i < n; ++i) workers_.emplace_back([this] { loop(); });
  }
  void loop() {
    for (;;) {
      spin_until([&] { return queued_.load(std::memory_order_acquire) > 0 || stop_.load(std::memory_order_acquire); });
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_.load(std::memory_order_relaxed) || !queue_.empty(); });
        if (stop_.load(std::memory_order_relaxed)) return;
        task = std::move(queue_.back());
        queue_.pop_back();
        queued_.store(static_cast<int>(queue_.size()), std::memory_order_release);
      }
      task();
      std::lock_guard<std::mutex> lock(mu_);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) done_cv_.notify_all();
    }
  }
  std::vector<std::thread> workers_;
  std::vector<std::function<void()>> queue_;  // guarded by mu_
  std::mutex mu_, job_mu_;
  std::condition_variable cv_, done_cv_;
  std::atomic<int> queued_{0};   // queue_.size(), readable without mu_ by spinning workers
  std::atomic<int> pending_{0};  // tasks of the current launch not yet finished
  std::atomic<bool> stop_{false};
};

// What the callers waiting on one request receive: the kernel, or the message of the error that
// refused it. A message, not the exception: each waiter throws an ordo::Error of its own, so no
// exception object is shared between threads (one shared object is destroyed by whichever thread
// drops the last reference, inside libstdc++, where ThreadSanitizer sees no synchronization and
// reported a race against another thread still reading what()).
struct Outcome {
  KernelHandle kernel;
  std::string error;
};

// The request cache: the kernels compile() returned, by request key, at most `capacity` of them.
// Past it, the least recently requested finished kernel is dropped; a caller still holding its
// handle keeps it (and its machine code) alive, and a later request for it compiles again (or
// loads it from the disk cache). Requests being compiled are never dropped.
struct Cache {
  struct Entry {
    std::shared_future<Outcome> outcome;
    std::list<std::string>::iterator recency;  // its place in `recency`
  };
  std::mutex mu;
  std::unordered_map<std::string, Entry> map;
  std::list<std::string> recency;  // request keys, most recently requested first
  size_t capacity = 0;             // 0 until compile() reads ORDO_KERNEL_CACHE_ENTRIES
  uint64_t hits = 0, misses = 0, evictions = 0;

  void erase(std::unordered_map<std::string, Entry>::iterator it) {
    recency.erase(it->second.recency);
    map.erase(it);
  }
  // Drops least recently requested finished entries until the cache is within capacity. Their
  // kernels are moved to `dropped`, for the caller to release after unlocking: unloading machine
  // code takes the JIT's own locks, and need not hold this one.
  void evict_over_capacity(std::vector<std::shared_future<Outcome>>& dropped) {
    auto it = recency.end();
    while (map.size() > capacity && it != recency.begin()) {
      --it;
      auto entry = map.find(*it);
      if (entry->second.outcome.wait_for(std::chrono::seconds(0)) != std::future_status::ready) continue;
      dropped.push_back(std::move(entry->second.outcome));
      it = recency.erase(it);
      map.erase(entry);
      ++evictions;
    }
  }
};
Cache& cache() {
  static Cache c;
  return c;
}

// Compiled programs of this process by program key (the SHA-256 of everything the machine code
// depends on, as the disk cache names them), below the request cache: a request that misses
// there but generates a program still loaded loads nothing and compiles nothing. Entries are
// weak: a program stays loaded while a kernel that runs it lives (in the request cache or in a
// caller's handle), and is unloaded with the last one.
class ProgramCache {
 public:
  std::shared_ptr<const detail::StageProgram> find(const std::string& program) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = programs_.find(program);
    if (it == programs_.end()) return nullptr;
    std::shared_ptr<const detail::StageProgram> p = it->second.lock();
    if (p) ++shared_;
    return p;
  }
  void add(const std::string& program, const std::shared_ptr<const detail::StageProgram>& p) {
    std::lock_guard<std::mutex> lock(mu_);
    programs_[program] = p;
    // Drops the keys of unloaded programs once the map has doubled since the last sweep, so the
    // map stays within twice the live programs at a constant cost per addition.
    if (programs_.size() < 2 * std::max<size_t>(swept_, 64)) return;
    std::erase_if(programs_, [](const auto& kv) { return kv.second.expired(); });
    swept_ = programs_.size();
  }
  uint64_t shared() {
    std::lock_guard<std::mutex> lock(mu_);
    return shared_;
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::weak_ptr<const detail::StageProgram>> programs_;
  size_t swept_ = 0;
  uint64_t shared_ = 0;
};
ProgramCache& program_cache() {
  static ProgramCache c;
  return c;
}

// ORDO_DUMP=ir,llvm writes each compile's stages to ORDO_DUMP_DIR (default ./ordo_dump):
// <kernel>.<n>.request.txt, .ir and .ll. For debugging; failures to write are reported, not fatal.
void dump_stages(const Request& r, const ir::Kernel& k, int rows_in_flight) {
  const char* what = std::getenv("ORDO_DUMP");
  if (!what || !*what) return;
  const std::string list = what;
  const char* dir_env = std::getenv("ORDO_DUMP_DIR");
  const std::filesystem::path dir = dir_env && *dir_env ? dir_env : "ordo_dump";
  static std::atomic<int> counter{0};
  const std::string stem = fmt::format("{}.{}", k.name, counter++);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  auto write = [&](const std::string& suffix, const std::string& text) {
    std::ofstream f(dir / (stem + suffix));
    f << text;
    if (!f) fmt::print(stderr, "ordo: ORDO_DUMP could not write {}\n", (dir / (stem + suffix)).string());
  };
  write(".request.txt", r.key() + "\n");
  if (list.find("ir") != std::string::npos) write(".ir", ir::print(k));
  if (list.find("llvm") != std::string::npos && r.target == Target::cpu) {
    llvm_backend::Options options;
    options.rows_in_flight = rows_in_flight;
    write(".ll", llvm_backend::emit_llvm_ir(k, options));
  }
}

// Compiles and loads one stage through its target's backend (src/backend.hpp). A program the
// backend keys is shared with every kernel of this process that generates it (share_programs;
// off for compile_uncached, whose callers want a compile), and, where the backend keeps programs
// on disk and the disk cache is on, loaded from or stored to it.
void compile_stage(const Request& r, detail::KernelStage& st, bool share_programs) {
  const detail::Backend& backend = detail::backend_for(r.target);
  const std::string text = backend.program_key(st.kernel, r);
  const std::string program_key = text.empty() ? std::string() : disk_cache::key(fmt::format("ordo {}\n{}", detail::kOrdoVersion, text));
  if (!program_key.empty() && share_programs) {
    if (std::shared_ptr<const detail::StageProgram> shared = program_cache().find(program_key)) {
      st.program = std::move(shared);
      return;
    }
  }
  const bool use_disk = !program_key.empty() && backend.keeps_programs_on_disk() && disk_cache::settings().enabled;
  // Held while this key is loaded, or compiled and stored: a thread or process that asks for
  // the same new program meanwhile waits, then loads it (include/ordo/disk_cache.hpp).
  std::optional<disk_cache::KeyLock> key_lock;
  if (use_disk) key_lock.emplace(program_key);
  if (use_disk) {
    if (std::optional<disk_cache::Entry> e = disk_cache::load(program_key)) {
      try {
        st.program = backend.load(st.kernel, r, detail::StoredProgram{std::move(e->object), std::move(e->symbol), e->rows_in_flight, nullptr});
        st.from_disk_cache = true;
      } catch (const Error&) {
        disk_cache::discard(program_key);  // intact but unloadable: rebuild below
      }
    }
  }
  if (!st.program) {
    detail::PhaseTimes times;
    detail::StoredProgram compiled = backend.compile(st.kernel, r, times);
    const auto t = std::chrono::steady_clock::now();
    st.program = backend.load(st.kernel, r, compiled);
    st.lower_ms += times.lower_ms;
    st.optimize_ms += times.optimize_ms;
    st.codegen_ms += times.codegen_ms + std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
    if (use_disk) disk_cache::store(program_key, disk_cache::Entry{std::move(compiled.object), compiled.symbol, compiled.rows_in_flight});
  }
  if (!program_key.empty() && share_programs) program_cache().add(program_key, st.program);
}

// The IR's extent of an argument is one of the public four, by the same value.
static_assert(int(ArgExtent::rows_by_cols) == int(ir::Extent::rows_by_cols) && int(ArgExtent::cols) == int(ir::Extent::cols) &&
              int(ArgExtent::rows) == int(ir::Extent::rows) && int(ArgExtent::rows_by_fixed) == int(ir::Extent::rows_by_fixed) &&
              int(ArgExtent::fixed) == int(ir::Extent::fixed) && int(ArgExtent::row_groups) == int(ir::Extent::row_groups));
ir::Extent ir_extent(ArgExtent e) { return static_cast<ir::Extent>(e); }
ArgExtent argument_extent(const ir::Buffer& b) {
  switch (b.extent) {
    case ir::Extent::rows_by_cols: return ArgExtent::rows_by_cols;
    case ir::Extent::cols: return ArgExtent::cols;
    case ir::Extent::rows: return ArgExtent::rows;
    case ir::Extent::rows_by_fixed: return ArgExtent::rows_by_fixed;
    case ir::Extent::fixed: return ArgExtent::fixed;
    case ir::Extent::row_groups: return ArgExtent::row_groups;
    case ir::Extent::scratch:
    case ir::Extent::row_blocks: break;
  }
  throw Error(fmt::format("internal: buffer {} ({}) is not an argument of the op", b.name, ir::name(b.extent)));
}

}  // namespace

std::string_view name(ArgExtent e) { return ir::name(ir_extent(e)); }

std::optional<int64_t> ArgSpec::checked_elements(int64_t rows, int64_t cols, const std::vector<int64_t>& sizes) const {
  return ir::launch_elements(ir_extent(extent), per_row, per_row_size, group_rows, rows, cols, sizes);
}

CompiledKernel::CompiledKernel() : parts_(std::make_unique<detail::KernelParts>()) {}
CompiledKernel::~CompiledKernel() = default;

size_t CompiledKernel::stage_count() const { return parts_->stages.size(); }
const std::vector<std::string>& CompiledKernel::sizes() const { return parts_->stages.at(0).kernel.sizes; }
int CompiledKernel::rows_in_flight() const { return parts_->stages.at(0).program->rows_in_flight(); }

const std::string& CompiledKernel::cuda_source(size_t stage) const {
  static const std::string none;
  const std::string* text = parts_->stages.at(stage).program->cuda_source();
  return text ? *text : none;
}

const cuda_backend::Compiled* CompiledKernel::cuda_compiled(size_t stage) const { return parts_->stages.at(stage).program->cuda_compiled(); }

namespace detail {
KernelHandle compile_new(const Request& r, bool share_programs) {
  auto start = std::chrono::steady_clock::now();
  auto k = std::make_shared<CompiledKernel>();
  detail::KernelParts& parts = *k->parts_;
  k->request_ = r;
  parts.order = gen::resolve(r);
  for (ir::Kernel& kernel : gen::build_stages(r, parts.order)) {
    if (std::string err = ir::verify(kernel); !err.empty()) throw Error("internal: generated IR is malformed: " + err);
    parts.stages.emplace_back().kernel = std::move(kernel);
  }
  // The caller's arguments; the workspaces follow them, and run() allocates those.
  for (const ir::Buffer& b : parts.stages[0].kernel.buffers) {
    if (ir::is_workspace(b)) parts.workspaces.push_back(b);
    else if (ir::is_argument(b)) k->args_.push_back(ArgSpec{b.name, b.elem, b.output, argument_extent(b), b.per_row, b.per_row_size,
                                                                                  b.extent == ir::Extent::row_groups ? b.block_rows : 0});
  }
  // Every stage takes the op's arguments, in one order (gen/gen.hpp, build_stages).
  for (const detail::KernelStage& s : parts.stages) {
    std::vector<const ir::Buffer*> args;
    for (const ir::Buffer& b : s.kernel.buffers)
      if (ir::is_argument(b)) args.push_back(&b);
    bool same = args.size() == k->args_.size() + parts.workspaces.size();
    for (size_t i = 0; same && i < args.size(); ++i) {
      const ir::Buffer& a = *args[i];
      if (i < k->args_.size()) {
        same = a.name == k->args_[i].name && a.elem == k->args_[i].dtype && argument_extent(a) == k->args_[i].extent;
      } else {
        const ir::Buffer& w = parts.workspaces[i - k->args_.size()];
        same = a.name == w.name && a.elem == w.elem && a.extent == w.extent && a.per_row == w.per_row && a.block_rows == w.block_rows;
      }
    }
    if (!same) throw Error(fmt::format("internal: stage {} of {} takes other arguments than stage 0", s.kernel.name, name(r.op)));
  }
  // Stages are independent programs: on the CPU and cuda-emu, stage 0 compiles on this thread
  // while the others compile on threads of their own, so a backward op's latency is its largest
  // stage's rather than their sum. (NVRTC's thread safety is not relied on: target cuda stays
  // serial.)
  const bool concurrent = r.target == Target::cpu || r.target == Target::cuda_emu;
  std::vector<std::future<void>> others;
  for (size_t i = 1; concurrent && i < parts.stages.size(); ++i)
    others.push_back(std::async(std::launch::async, [&r, &parts, i, share_programs] { compile_stage(r, parts.stages[i], share_programs); }));
  std::exception_ptr failure;
  for (size_t i = 0; i < parts.stages.size(); ++i) {
    try {
      if (i == 0 || !concurrent) compile_stage(r, parts.stages[i], share_programs);
      else others[i - 1].get();
    } catch (...) {
      if (!failure) failure = std::current_exception();  // the first stage's error; every thread is joined first
    }
  }
  if (failure) std::rethrow_exception(failure);
  for (const detail::KernelStage& s : parts.stages) {
    k->lower_ms_ += s.lower_ms;
    k->optimize_ms_ += s.optimize_ms;
    k->codegen_ms_ += s.codegen_ms;
    k->from_disk_cache_ = k->from_disk_cache_ || s.from_disk_cache;
    dump_stages(r, s.kernel, s.program->rows_in_flight());
  }
  k->compile_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return k;
}
}  // namespace detail

KernelHandle compile_uncached(const Request& r) { return detail::compile_new(r, false); }

namespace {
constexpr size_t kDefaultKernelCacheEntries = 512;

// ORDO_KERNEL_CACHE_ENTRIES: the request cache's capacity, a positive integer. Read once; an
// invalid value is refused by every compile() with the same message.
size_t configured_capacity() {
  static const std::variant<size_t, std::string> configured = []() -> std::variant<size_t, std::string> {
    const char* v = std::getenv("ORDO_KERNEL_CACHE_ENTRIES");
    if (!v || !*v) return kDefaultKernelCacheEntries;
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(v, &end, 10);
    if (*end != 0 || errno == ERANGE || n == 0 || !std::isdigit(static_cast<unsigned char>(v[0])))
      return fmt::format("ORDO_KERNEL_CACHE_ENTRIES=\"{}\" is not a positive whole number of kernels (default {})", v,
                         kDefaultKernelCacheEntries);
    return static_cast<size_t>(n);
  }();
  if (const std::string* error = std::get_if<std::string>(&configured)) throw Error(*error);
  return std::get<size_t>(configured);
}
}  // namespace

void set_kernel_cache_capacity(size_t entries) {
  if (entries == 0) throw Error("the kernel cache's capacity must be at least 1 kernel, got 0");
  Cache& c = cache();
  std::vector<std::shared_future<Outcome>> dropped;  // destroyed after the lock is released
  std::lock_guard<std::mutex> lock(c.mu);
  c.capacity = entries;
  c.evict_over_capacity(dropped);
}

namespace {
std::atomic<Executor>& executor_choice();  // below, with parallel_for
}  // namespace

KernelHandle compile(const Request& r) {
  (void)executor_choice();  // a bad ORDO_EXECUTOR fails every compile, whatever size the launches are
  const std::string key = r.key();
  Cache& c = cache();
  std::promise<Outcome> promise;
  std::shared_future<Outcome> existing;
  std::vector<std::shared_future<Outcome>> dropped;  // released after the lock, below
  {
    const size_t configured = configured_capacity();  // throws on a bad setting
    std::lock_guard<std::mutex> lock(c.mu);
    if (!c.capacity) c.capacity = configured;
    auto it = c.map.find(key);
    if (it != c.map.end()) {
      ++c.hits;
      existing = it->second.outcome;
      c.recency.splice(c.recency.begin(), c.recency, it->second.recency);
    } else {
      ++c.misses;
      c.recency.push_front(key);
      c.map.emplace(key, Cache::Entry{promise.get_future().share(), c.recency.begin()});
      c.evict_over_capacity(dropped);
    }
  }
  dropped.clear();
  if (existing.valid()) {
    const Outcome& o = existing.get();  // waits, outside the lock, if another thread is compiling it
    if (!o.kernel) throw Error(o.error);
    return o.kernel;
  }
  // A failed request is not cached: waiters get its message, later callers try again.
  auto forget = [&](std::string message) {
    {
      std::lock_guard<std::mutex> lock(c.mu);
      if (auto it = c.map.find(key); it != c.map.end()) c.erase(it);
    }
    promise.set_value(Outcome{nullptr, std::move(message)});
  };
  try {
    KernelHandle k = detail::compile_new(r, true);
    promise.set_value(Outcome{k, {}});
    return k;
  } catch (const std::exception& e) {
    forget(e.what());
    throw;
  } catch (...) {
    forget("internal: compiling " + key + " threw a non-standard exception");
    throw;
  }
}

namespace {

// The OpenMP runtime already in the process, reached through GOMP_parallel, the entry GCC emits for
// `#pragma omp parallel` (libgomp's ABI since GCC 4.9): a launch is one parallel region of the
// calling thread's team, the team PyTorch's parallel_for uses from the same thread.
struct OpenMp {
  using Parallel = void (*)(void (*)(void*), void*, unsigned, unsigned);
  Parallel parallel = nullptr;
  int (*thread_num)() = nullptr;
  int (*num_threads)() = nullptr;

  // The loaded libgomp, or nothing: RTLD_NOLOAD never loads a second OpenMP runtime.
  static const OpenMp* loaded() {
    static const OpenMp found = [] {
      OpenMp o;
      if (void* h = dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD)) {
        o.parallel = reinterpret_cast<Parallel>(dlsym(h, "GOMP_parallel"));
        o.thread_num = reinterpret_cast<int (*)()>(dlsym(h, "omp_get_thread_num"));
        o.num_threads = reinterpret_cast<int (*)()>(dlsym(h, "omp_get_num_threads"));
      }
      return o;
    }();
    return found.parallel && found.thread_num && found.num_threads ? &found : nullptr;
  }

  void parallel_for(int64_t n, int threads, const std::function<void(int64_t, int64_t)>& fn) const {
    if (threads == 1 || n < 2) return fn(0, n);
    struct Region {
      const OpenMp* omp;
      int64_t n;
      const std::function<void(int64_t, int64_t)>* fn;
    } region{this, n, &fn};
    // Each thread of the team takes one contiguous block, as the pool does.
    parallel(
        [](void* p) {
          const Region& r = *static_cast<const Region*>(p);
          const int64_t t = r.omp->thread_num(), team = r.omp->num_threads();
          const int64_t per = (r.n + team - 1) / team, begin = std::min(r.n, t * per), end = std::min(r.n, begin + per);
          if (begin < end) (*r.fn)(begin, end);
        },
        &region, threads <= 0 ? 0u : static_cast<unsigned>(threads), 0u);
  }
};

std::atomic<Executor>& executor_choice() {
  static std::atomic<Executor> e = [] {
    const char* env = std::getenv("ORDO_EXECUTOR");
    if (!env || !*env || std::string_view(env) == "pool") return Executor::pool;
    if (std::string_view(env) == "openmp") return Executor::openmp;
    throw Error(fmt::format("ORDO_EXECUTOR=\"{}\": expected pool or openmp", env));
  }();
  return e;
}

}  // namespace

void set_executor(Executor e) {
  if (e == Executor::openmp && !OpenMp::loaded())
    throw Error("executor openmp: no OpenMP runtime (libgomp.so.1) is loaded in this process; load the library that uses it (torch) first");
  executor_choice().store(e);
}

Executor executor() { return executor_choice().load(); }

void parallel_for(int64_t n, int threads, const std::function<void(int64_t, int64_t)>& fn) {
  if (executor_choice().load(std::memory_order_relaxed) == Executor::openmp) {
    if (const OpenMp* omp = OpenMp::loaded()) return omp->parallel_for(n, threads, fn);
    throw Error("ORDO_EXECUTOR=openmp: no OpenMP runtime (libgomp.so.1) is loaded in this process");
  }
  Pool::instance().parallel_for(n, threads, fn);
}

CacheStats cache_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  const uint64_t capacity = c.capacity ? c.capacity : configured_capacity();
  return CacheStats{c.hits, c.misses, static_cast<uint64_t>(c.map.size()), program_cache().shared(), c.evictions, capacity};
}

namespace {
// Workspace memory starts at a 64-byte boundary, a cache line: operator new's 16 bytes would split
// a line on every 64-byte vector access (the one-pass layer_norm_backward's block sums, read and
// written for every row, among others).
constexpr std::align_val_t kWorkspaceAlignment{64};
struct AlignedDelete {
  void operator()(std::byte* p) const { ::operator delete[](p, kWorkspaceAlignment); }
};
using WorkspaceMemory = std::unique_ptr<std::byte[], AlignedDelete>;
WorkspaceMemory allocate_workspace(size_t bytes) { return WorkspaceMemory(new (kWorkspaceAlignment) std::byte[bytes]); }

// Workspaces up to this size are kept by the launching thread and reused by its later launches
// (of any kernel). Allocated fresh, a few MiB went back to the OS when freed and faulted in again
// page by page on the next launch: `fast` bf16 attention's 4 MiB of widened K and V (B*H = 8,
// S = 1024, D = 64) took about 1000 page faults per launch. Larger workspaces are per launch.
constexpr int64_t kReusedWorkspaceBytes = int64_t(64) << 20;

// The calling thread's memory for workspace `index` of a launch, at least `bytes` long. A launch
// runs to its end before the thread can start another, so one set per thread is enough.
std::byte* reused_workspace(size_t index, size_t bytes) {
  struct Held {
    WorkspaceMemory memory;
    size_t bytes = 0;
  };
  thread_local std::vector<Held> held;
  if (held.size() <= index) held.resize(index + 1);
  Held& h = held[index];
  if (h.bytes < bytes) {
    h.memory.reset();
    h.bytes = 0;  // held nothing, should the allocation below throw
    h.memory = allocate_workspace(bytes);
    h.bytes = bytes;
  }
  return h.memory.get();
}

// An attention launch's work in the units of StageLaunch::work_elements (a norm's element costs
// about as much as 8 of attention's multiply-adds): rows*S_q*S_k*D/8. Its largest argument
// undercounts it by a factor of S_k: B*H = 8, S = 48, D = 32 (a small model's layer) is 12288
// elements, one thread's work by that count, yet 64 us of it on one thread (Intel Xeon, f32,
// torch2.15-cpu) where torch's own call takes 43 us on two.
int64_t attention_work(const Request& r, int64_t rows, const std::vector<int64_t>& sizes) {
  if (forward_of(r.op) != OpKind::attention) return 0;
  const int64_t seq_k = r.seq_k_at_launch ? sizes.at(0) : r.seq_k;
  int64_t work = 0;  // saturates rather than overflows: only its size against the threshold matters
  if (__builtin_mul_overflow(rows, r.seq_q, &work) || __builtin_mul_overflow(work, seq_k, &work) ||
      __builtin_mul_overflow(work, r.cols, &work))
    return std::numeric_limits<int64_t>::max();
  return work / 8;
}

// One stage over the launch. Its grid: the rows (then any fixed dims), or for a column stage its
// fixed dims alone; every entry point also gets the launch's rows and size arguments after the
// grid's extents. The stage's backend runs it (src/backends.cpp).
void run_stage(const CompiledKernel& kernel, const detail::KernelStage& s, const std::vector<void*>& ptrs,
               const std::vector<ir::BufferArg>& views, const std::vector<BufferRef>& buffers, int64_t rows, const std::vector<int64_t>& sizes,
               int threads, CompiledKernel::Stores stores) {
  const ir::Kernel& k = s.kernel;
  const std::vector<int64_t> extents = ir::launch_extents(k, rows, sizes);
  int64_t instances = 1;
  for (size_t d = 0; d + 1 + sizes.size() < extents.size(); ++d)
    if (__builtin_mul_overflow(instances, extents[d], &instances)) throw Error(fmt::format("rows={} makes more than 2^63 program instances", rows));
  const int64_t cols = kernel.launch_cols(sizes);
  const std::vector<ArgSpec>& args = kernel.args();
  int64_t output_bytes = 0;
  constexpr int64_t kStreamAbove = int64_t(32) << 20;
  for (const ArgSpec& a : args)  // each term is at most 2^62 bytes (kMaxElements); stop before a sum could overflow
    if (a.output && a.extent == ArgExtent::rows_by_cols && output_bytes <= kStreamAbove)
      output_bytes += a.elements(rows, cols, sizes) * size_bytes(a.dtype);
  int64_t work = 0;
  for (const ArgSpec& a : args) work = std::max(work, a.elements(rows, cols, sizes));
  work = std::max(work, attention_work(kernel.request(), rows, sizes));
  const bool stream = stores == CompiledKernel::Stores::streaming || (stores == CompiledKernel::Stores::automatic && output_bytes > kStreamAbove);
  s.program->launch(detail::StageLaunch{k, buffers, ptrs, views, args, kernel.parts().workspaces, extents, instances, work, threads, stream});
}
}  // namespace

void CompiledKernel::run_with_sizes(const std::vector<BufferRef>& buffers, int64_t rows, const std::vector<int64_t>& sizes, int threads,
                                    Stores stores) const {
  if (rows < 0) throw Error(fmt::format("rows must be >= 0, got {}", rows));
  const std::vector<std::string>& names = this->sizes();
  if (sizes.size() != names.size()) {
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    throw Error(names.empty() ? fmt::format("{} with order '{}' fixes every length at compile time; got {} size arguments", name(request_.op),
                                            request_.order, sizes.size())
                              : fmt::format("{} takes {} size argument(s) at launch ({}), got {}", name(request_.op), names.size(), list,
                                            sizes.size()));
  }
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] < 1 || sizes[i] > (int64_t(1) << 24))
      throw Error(fmt::format("{} = {} outside [1, 2^24]", names[i], sizes[i]));
  const int64_t cols = launch_cols(sizes);
  // Lengths and offsets are 64-bit everywhere (the IR's index type is i64, and so are the
  // LLVM backend's addresses), so rows*N beyond 2^31 runs. Past kMaxElements, rows*N, or the
  // bytes of a buffer of it, would overflow int64_t: such a launch is rejected here, before any
  // length is computed from it.
  if (rows > 0 && cols > kMaxElements / rows)
    throw Error(fmt::format("rows={} with N={}: rows*N exceeds the {} elements a launch may have", rows, cols, kMaxElements));
  if (buffers.size() != args_.size()) {
    std::string names;
    for (const ArgSpec& a : args_) names += (names.empty() ? "" : ", ") + a.name;
    throw Error(fmt::format("{} takes {} buffers ({}), got {}", name(request_.op), args_.size(), names, buffers.size()));
  }
  std::vector<void*> ptrs;
  std::vector<ir::BufferArg> views;
  for (size_t i = 0; i < args_.size(); ++i) {
    const ArgSpec& a = args_[i];
    const std::optional<int64_t> checked = a.checked_elements(rows, cols, sizes);
    if (!checked || *checked > kMaxElements)
      throw Error(fmt::format("{}: rows={} makes more than the {} elements a launch may have", a.name, rows, kMaxElements));
    const int64_t need = *checked;
    if (buffers[i].dtype != a.dtype)
      throw Error(fmt::format("{}: dtype {} given, kernel expects {}", a.name, name(buffers[i].dtype), name(a.dtype)));
    if (buffers[i].elements != need)
      throw Error(fmt::format("{}: {} elements given, expected {} ({} with rows={}, N={}{})", a.name, buffers[i].elements, need,
                              name(a.extent), rows, cols,
                              a.per_row_size >= 0 ? fmt::format(", {}={}", names[size_t(a.per_row_size)], sizes[size_t(a.per_row_size)]) : ""));
    if (need > 0 && !buffers[i].data) throw Error(fmt::format("{}: null data pointer", a.name));
    ptrs.push_back(buffers[i].data);
    views.push_back(ir::BufferArg{buffers[i].data, buffers[i].elements});
  }
  for (const detail::KernelStage& s : parts_->stages)
    if (const ir::Kernel::RefusedLaunch* r = ir::refusal(s.kernel, rows)) throw Error(fmt::format("rows={}: {}", rows, r->why));
  // A launch of no rows runs only the stages defined for it (Kernel::runs_without_rows: an empty
  // batch's loss); the others have nothing to do.
  const auto runs = [rows](const detail::KernelStage& s) { return rows > 0 || s.kernel.runs_without_rows; };
  if (std::none_of(parts_->stages.begin(), parts_->stages.end(), runs)) return;
  // The workspaces, uninitialized (the first stage writes before any reads).
  std::vector<WorkspaceMemory> workspace_memory;  // this launch's, past the reuse limit
  std::vector<BufferRef> all_buffers = buffers;
  for (size_t i = 0; i < parts_->workspaces.size(); ++i) {
    const ir::Buffer& w = parts_->workspaces[i];
    const std::optional<int64_t> elements = ir::launch_elements(w, rows, cols);
    if (!elements || *elements > kMaxElements) throw Error(fmt::format("{}: rows={} makes a workspace of more than 2^59 elements", w.name, rows));
    const int64_t bytes = *elements * size_bytes(w.elem);
    std::byte* memory = nullptr;
    try {
      memory = bytes <= kReusedWorkspaceBytes ? reused_workspace(i, static_cast<size_t>(bytes))
                                              : workspace_memory.emplace_back(allocate_workspace(static_cast<size_t>(bytes))).get();
    } catch (const std::bad_alloc&) {
      throw Error(fmt::format("{}: cannot allocate the {}-byte workspace for rows={}", w.name, bytes, rows));
    }
    ptrs.push_back(memory);
    views.push_back(ir::BufferArg{memory, *elements});
    all_buffers.push_back(BufferRef{memory, *elements, w.elem});
  }
  for (const detail::KernelStage& s : parts_->stages)
    if (runs(s)) run_stage(*this, s, ptrs, views, all_buffers, rows, sizes, threads, stores);
}

}  // namespace ordo
