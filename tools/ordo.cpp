// The ordo command line: run, orders, compare, emit, bench, demo.
// Exit codes: 0 success; 2 a bad request or bad input (the message names it); 1 internal error.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/llvm/llvm_backend.hpp"
#include "gen/gen.hpp"
#include "ir/error.hpp"
#include "ordo/compare.hpp"
#include "ordo/disk_cache.hpp"
#include "ordo/npy.hpp"
#include "ordo/ordo.hpp"
#include "ordo/peak.hpp"
#include "ordo/plot.hpp"

namespace {

using ordo::Error;

const char* kUsage = R"(ordo: reduction orders as data, compiled to kernels

usage:
  ordo run <op> --order NAME [--eps E] [--acc f32|f64] [--allow-mixed-dtypes] [--target cpu|interpreter|cuda|cuda-emu]
                --in NAME=FILE.npy ... --out NAME=FILE.npy ...
  ordo orders [op]
  ordo compare <op> [--orders a,b,...] [--rows R --cols N --dtype T --seed S --offset O --scale S]
                   [--plot FILE.png]  (a histogram of ULP distances from float64, one panel per order)
  ordo emit --ir|--llvm|--cuda|--ptx <op> --order NAME [--cols N --dtype T --arch sm_90]
                   --cuda: the CUDA C++ source, --ptx: NVRTC's PTX; both end with ptxas's register/spill line
  ordo bench <op> --order NAME [--rows R --cols N --dtype T --threads T] [--baseline copy] --json
  ordo demo        layer_norm in every order on one default input: distance, agreement, time
  ordo build <op> --order NAME|--orders a,b --cols N [--dtype T ...] [--target cpu] -o libNAME.so
                   offline: a shared library (no LLVM needed to use it), libNAME.h and libNAME.json
  ordo build <op> --order NAME --cols N [--dtype T ...] --target cuda [--arch sm_90] -o k.cubin | --ptx -o k.ptx
                   offline CUDA: NVRTC's cubin or PTX and k.json (entry, launch, parameters, ptxas, request)
  ordo cache stats|clear   the persistent kernel cache ($ORDO_CACHE_DIR, else $XDG_CACHE_HOME/ordo,
                   else ~/.cache/ordo; ORDO_CACHE=0 disables it, ORDO_CACHE_MAX_MB bounds it)

ops: layer_norm (in x, weight, bias; out y, mean, rstd), rms_norm (in x, weight; out y, rstd),
     var_mean (in x; out var, mean), softmax and log_softmax (in x; out y).
     x may have any rank; the op reduces its last dim N.
     attention (in q [..., S_q, D], k, v [..., S_k, D]; out out, and lse when asked for):
       ordo run attention --order NAME [--causal] [--scale S] --in q=Q.npy --in k=K.npy --in v=V.npy
                          --out out=O.npy [--out lse=L.npy]
       compare/bench/emit/build take --sq N --sk N --cols D [--causal] for attention.
.npy dtypes: float32 '<f4', float16 '<f2', bfloat16 as uint16 bit patterns '<u2'.
common options: --no-weight --no-bias --weight-dtype T --acc T --eps E --target T
                --rows-in-flight R (CPU rows run in lock step; 0 = backend's choice; never changes bits)
                --arch sm_80|sm_86|sm_89|sm_90 (target cuda; default sm_90)
)";

// Command-line options after the subcommand: flags, key-value options, and positionals.
struct Args {
  std::vector<std::string> positional;
  std::multimap<std::string, std::string> values;
  std::vector<std::string> flags;

  static Args parse(int argc, char** argv, int first, const std::vector<std::string>& flag_names,
                    const std::vector<std::string>& value_names) {
    Args a;
    for (int i = first; i < argc; ++i) {
      std::string s = argv[i];
      if (s.rfind("--", 0) != 0) {
        a.positional.push_back(s);
        continue;
      }
      std::string key = s.substr(2), value;
      bool inline_value = false;
      if (size_t eq = key.find('='); eq != std::string::npos && key.rfind("in", 0) != 0 && key.rfind("out", 0) != 0) {
        value = key.substr(eq + 1);
        key = key.substr(0, eq);
        inline_value = true;
      }
      if (std::find(flag_names.begin(), flag_names.end(), key) != flag_names.end()) {
        if (inline_value) throw Error(fmt::format("--{} takes no value", key));
        a.flags.push_back(key);
      } else if (std::find(value_names.begin(), value_names.end(), key) != value_names.end()) {
        if (!inline_value) {
          if (i + 1 >= argc) throw Error(fmt::format("--{} needs a value", key));
          value = argv[++i];
        }
        a.values.emplace(key, value);
      } else {
        throw Error(fmt::format("unknown option '{}'", s));
      }
    }
    return a;
  }
  bool flag(const std::string& k) const { return std::find(flags.begin(), flags.end(), k) != flags.end(); }
  std::optional<std::string> get(const std::string& k) const {
    auto [lo, hi] = values.equal_range(k);
    if (lo == hi) return std::nullopt;
    if (std::next(lo) != hi) throw Error(fmt::format("--{} given more than once", k));
    return lo->second;
  }
  std::vector<std::string> all(const std::string& k) const {
    std::vector<std::string> out;
    for (auto [lo, hi] = values.equal_range(k); lo != hi; ++lo) out.push_back(lo->second);
    return out;
  }
};

int64_t parse_int(const std::string& what, const std::string& s, int64_t lo, int64_t hi) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) throw Error(fmt::format("{} '{}' is not an integer", what, s));
  if (v < lo || v > hi) throw Error(fmt::format("{} {} is outside [{}, {}]", what, v, lo, hi));
  return v;
}

double parse_double(const std::string& what, const std::string& s) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty()) throw Error(fmt::format("{} '{}' is not a number", what, s));
  return v;
}

ordo::ScalarType parse_dtype(const std::string& what, const std::string& s) {
  auto t = ordo::parse_scalar_type(s);
  if (!t || *t == ordo::ScalarType::f64) throw Error(fmt::format("{} '{}' is not f32, bf16 or f16", what, s));
  return *t;
}

ordo::OpKind parse_op_arg(const Args& a) {
  if (a.positional.empty()) throw Error("missing the op: layer_norm, rms_norm, var_mean, softmax, log_softmax or attention");
  if (a.positional.size() > 1) throw Error(fmt::format("unexpected argument '{}'", a.positional[1]));
  auto op = ordo::parse_op(a.positional[0]);
  if (!op) throw Error(fmt::format("unknown op '{}'; ops: layer_norm, rms_norm, var_mean, softmax, log_softmax, attention", a.positional[0]));
  return *op;
}

const std::vector<std::string> kRequestValues = {"order", "eps", "acc", "target", "weight-dtype", "cols", "dtype", "rows-in-flight",
                                                 "arch", "sq", "sk"};
const std::vector<std::string> kRequestFlags = {"allow-mixed-dtypes", "no-weight", "no-bias", "causal", "lse"};

// Fields every subcommand shares.
ordo::Request request_from(const Args& a, ordo::OpKind op) {
  ordo::Request r;
  r.op = op;
  if (auto v = a.get("order")) r.order = *v;
  if (auto v = a.get("eps")) r.eps = parse_double("--eps", *v);
  if (auto v = a.get("acc")) {
    auto t = ordo::parse_scalar_type(*v);
    if (!t || (*t != ordo::ScalarType::f32 && *t != ordo::ScalarType::f64)) throw Error(fmt::format("--acc '{}' is not f32 or f64", *v));
    r.acc_dtype = *t;
  }
  if (auto v = a.get("target")) {
    auto t = ordo::parse_target(*v);
    if (!t) throw Error(fmt::format("--target '{}' is not cpu, interpreter, cuda or cuda-emu", *v));
    r.target = *t;
  }
  if (auto v = a.get("arch")) {
    if (v->rfind("sm_", 0) != 0) throw Error(fmt::format("--arch '{}' is not sm_80, sm_86, sm_89 or sm_90", *v));
    r.cuda_arch = static_cast<int>(parse_int("--arch", v->substr(3), 0, 1000));
    if (!ordo::cuda_backend::supported_arch(r.cuda_arch)) throw Error(fmt::format("--arch '{}' is not sm_80, sm_86, sm_89 or sm_90", *v));
  }
  if (auto v = a.get("dtype")) r.x_dtype = parse_dtype("--dtype", *v);
  if (auto v = a.get("weight-dtype")) r.weight_dtype = parse_dtype("--weight-dtype", *v);
  if (auto v = a.get("cols")) r.cols = parse_int("--cols", *v, 0, int64_t(1) << 40);
  if (auto v = a.get("rows-in-flight")) r.rows_in_flight = static_cast<int>(parse_int("--rows-in-flight", *v, 0, 16));
  r.allow_mixed_dtypes = a.flag("allow-mixed-dtypes");
  // attention's shape (rows are batch*heads); other ops reject these in resolve().
  if (auto v = a.get("sq")) r.seq_q = parse_int("--sq", *v, 1, int64_t(1) << 24);
  if (auto v = a.get("sk")) r.seq_k = parse_int("--sk", *v, 1, int64_t(1) << 24);
  r.causal = a.flag("causal");
  r.lse_output = a.flag("lse");
  if (op == ordo::OpKind::attention) {
    if (!r.seq_q) r.seq_q = r.seq_k ? r.seq_k : 1024;
    if (!r.seq_k) r.seq_k = r.seq_q;
  }
  r.has_weight = (op == ordo::OpKind::layer_norm || op == ordo::OpKind::rms_norm) && !a.flag("no-weight");
  r.has_bias = op == ordo::OpKind::layer_norm && !a.flag("no-bias");
  return r;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0, depth = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i < s.size() && s[i] == '(') ++depth;
    if (i < s.size() && s[i] == ')' && depth) --depth;
    if (i == s.size() || (s[i] == sep && depth == 0)) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

std::pair<std::string, std::string> name_file(const std::string& opt, const std::string& v) {
  size_t eq = v.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == v.size())
    throw Error(fmt::format("--{} '{}' must be NAME=FILE.npy", opt, v));
  return {v.substr(0, eq), v.substr(eq + 1)};
}

// Reads the --in files named in `names`; every one must be given once.
std::map<std::string, ordo::NpyArray> read_inputs(const Args& a, ordo::OpKind op, const std::vector<std::string>& names) {
  std::map<std::string, ordo::NpyArray> inputs;
  for (const std::string& v : a.all("in")) {
    auto [n, file] = name_file("in", v);
    if (std::find(names.begin(), names.end(), n) == names.end())
      throw Error(fmt::format("{} has no input '{}'; inputs: {}", ordo::name(op), n, fmt::join(names, ", ")));
    if (inputs.count(n)) throw Error(fmt::format("input '{}' given twice", n));
    inputs.emplace(n, ordo::read_npy(file));
  }
  return inputs;
}

// Checks --out names against the kernel's outputs.
std::map<std::string, std::string> output_files(const Args& a, const ordo::CompiledKernel& k) {
  std::map<std::string, std::string> out_files;
  for (const std::string& v : a.all("out")) {
    auto [n, file] = name_file("out", v);
    bool known = false;
    std::string outs;
    for (const ordo::ArgSpec& s : k.args())
      if (s.output) {
        known |= s.name == n;
        outs += (outs.empty() ? "" : ", ") + s.name;
      }
    if (!known) throw Error(fmt::format("{} has no output '{}'; outputs: {}", ordo::name(k.request().op), n, outs));
    if (out_files.count(n)) throw Error(fmt::format("output '{}' given twice", n));
    out_files[n] = file;
  }
  if (out_files.empty()) throw Error("no --out NAME=FILE.npy given");
  return out_files;
}

// Runs `k` on `rows` rows with the inputs named by its arguments and outputs shaped by
// out_shape, then writes the outputs named in out_files: only after everything has succeeded,
// all of them or none.
void run_and_write(const ordo::CompiledKernel& k, const std::map<std::string, ordo::NpyArray>& inputs,
                   const std::map<std::string, std::string>& out_files, int64_t rows, int threads,
                   const std::function<std::vector<int64_t>(const ordo::ArgSpec&)>& out_shape) {
  std::vector<ordo::NpyArray> buffers;
  for (const ordo::ArgSpec& s : k.args()) {
    ordo::NpyArray b;
    if (!s.output) b = inputs.at(s.name);
    else {
      b.dtype = s.dtype;
      b.shape = out_shape(s);
      b.data.assign(static_cast<size_t>(s.elements(rows, k.request().cols) * ordo::size_bytes(s.dtype)), 0);
    }
    buffers.push_back(std::move(b));
  }
  std::vector<ordo::BufferRef> refs;
  for (ordo::NpyArray& b : buffers) refs.push_back(ordo::BufferRef{b.data.data(), b.elements(), b.dtype});
  k.run(refs, rows, threads);
  std::vector<std::pair<std::string, const ordo::NpyArray*>> files;
  for (size_t i = 0; i < buffers.size(); ++i)
    if (auto it = out_files.find(k.args()[i].name); it != out_files.end()) files.emplace_back(it->second, &buffers[i]);
  ordo::write_npy_files_atomic(files);
}

// ordo run attention: q [..., S_q, D], k and v [..., S_k, D] with the same leading dims; out is
// shaped like q and lse like q without D.
int run_attention(const Args& a, ordo::Request r, int threads) {
  std::map<std::string, ordo::NpyArray> in = read_inputs(a, r.op, {"q", "k", "v"});
  for (const char* n : {"q", "k", "v"})
    if (!in.count(n)) throw Error(fmt::format("missing --in {}=FILE.npy", n));
  const ordo::NpyArray &q = in.at("q"), &k = in.at("k"), &v = in.at("v");
  for (const auto& [n, t] : in)
    if (t.shape.size() < 2) throw Error(fmt::format("{} has shape {}; attention needs [..., S, D]", n, t.shape_text()));
  if (k.shape != v.shape) throw Error(fmt::format("k has shape {} but v has {}; they must match", k.shape_text(), v.shape_text()));
  if (!std::equal(q.shape.begin(), q.shape.end() - 2, k.shape.begin(), k.shape.end() - 2) || q.shape.size() != k.shape.size())
    throw Error(fmt::format("q {} and k {} differ in their leading (batch, head) dims", q.shape_text(), k.shape_text()));
  if (q.shape.back() != k.shape.back()) throw Error(fmt::format("q has D = {} but k has D = {}", q.shape.back(), k.shape.back()));
  if (q.dtype != k.dtype || q.dtype != v.dtype)
    throw Error(fmt::format("q, k and v must share one dtype; got {}, {}, {}", ordo::name(q.dtype), ordo::name(k.dtype), ordo::name(v.dtype)));
  r.cols = q.shape.back();
  r.seq_q = q.shape[q.shape.size() - 2];
  r.seq_k = k.shape[k.shape.size() - 2];
  r.x_dtype = q.dtype;
  int64_t rows = 1;
  for (size_t i = 0; i + 2 < q.shape.size(); ++i) rows *= q.shape[i];
  if (auto s = a.get("scale")) r.scale = parse_double("--scale", *s);
  r.causal = a.flag("causal");
  bool want_lse = false;
  for (const std::string& o : a.all("out")) want_lse |= name_file("out", o).first == "lse";
  r.lse_output = want_lse;
  ordo::KernelHandle kernel = ordo::compile(r);
  run_and_write(*kernel, in, output_files(a, *kernel), rows, threads, [&](const ordo::ArgSpec& s) {
    return s.name == "out" ? q.shape : std::vector<int64_t>(q.shape.begin(), q.shape.end() - 1);
  });
  return 0;
}

int cmd_run(int argc, char** argv) {
  std::vector<std::string> values = kRequestValues;
  values.insert(values.end(), {"in", "out", "threads", "scale"});
  Args a = Args::parse(argc, argv, 2, kRequestFlags, values);
  const ordo::OpKind op = parse_op_arg(a);
  if (a.get("sq") || a.get("sk") || a.flag("lse"))
    throw Error("ordo run takes attention's shape from the --in files and writes lse when --out lse= names it; drop --sq/--sk/--lse");
  if (op != ordo::OpKind::attention && (a.get("scale") || a.flag("causal")))
    throw Error(fmt::format("--scale and --causal are attention's; {} takes neither", ordo::name(op)));
  if (a.get("cols") || a.get("dtype") || a.get("weight-dtype") || a.flag("no-weight") || a.flag("no-bias"))
    throw Error("ordo run takes N, dtypes and which inputs exist from the --in files; drop --cols/--dtype/--weight-dtype/--no-weight/--no-bias");
  ordo::Request r = request_from(a, op);
  if (!a.get("order")) throw Error("missing --order NAME (see `ordo orders`)");
  const int threads = a.get("threads") ? static_cast<int>(parse_int("--threads", *a.get("threads"), 0, 1024)) : 0;
  if (op == ordo::OpKind::attention) return run_attention(a, r, threads);

  const std::map<std::string, ordo::NpyArray> inputs =
      read_inputs(a, op, op == ordo::OpKind::layer_norm ? std::vector<std::string>{"x", "weight", "bias"}
                         : op == ordo::OpKind::rms_norm ? std::vector<std::string>{"x", "weight"}
                                                        : std::vector<std::string>{"x"});
  if (!inputs.count("x")) throw Error("missing --in x=FILE.npy");
  const ordo::NpyArray& x = inputs.at("x");
  if (x.shape.empty()) throw Error(fmt::format("x has shape (), it needs at least one dim"));
  r.cols = x.shape.back();
  r.x_dtype = x.dtype;
  const int64_t rows = r.cols == 0 ? 0 : x.elements() / r.cols;
  r.has_weight = inputs.count("weight") > 0;
  r.has_bias = inputs.count("bias") > 0;
  for (const char* n : {"weight", "bias"}) {
    if (!inputs.count(n)) continue;
    const ordo::NpyArray& w = inputs.at(n);
    if (w.shape.size() != 1 || w.shape[0] != r.cols)
      throw Error(fmt::format("{} has shape {}, expected ({},) to match N of x {}", n, w.shape_text(), r.cols, x.shape_text()));
  }
  if (r.has_weight) r.weight_dtype = inputs.at("weight").dtype;
  if (r.has_bias) {
    if (r.has_weight && inputs.at("bias").dtype != inputs.at("weight").dtype)
      throw Error(fmt::format("weight is {} but bias is {}; they must match", ordo::name(inputs.at("weight").dtype),
                              ordo::name(inputs.at("bias").dtype)));
    r.weight_dtype = inputs.at("bias").dtype;
  }

  ordo::KernelHandle k = ordo::compile(r);
  run_and_write(*k, inputs, output_files(a, *k), rows, threads, [&](const ordo::ArgSpec& s) {
    return s.extent == ordo::ir::Extent::rows_by_cols ? x.shape : std::vector<int64_t>(x.shape.begin(), x.shape.end() - 1);
  });
  return 0;
}

int cmd_orders(int argc, char** argv) {
  Args a = Args::parse(argc, argv, 2, {}, {});
  std::optional<ordo::OpKind> op;
  if (!a.positional.empty()) op = parse_op_arg(a);
  for (const ordo::gen::NamedOrder& n : ordo::gen::named_orders()) {
    std::vector<std::string> ops, dtypes;
    bool match = !op;
    for (ordo::OpKind o : n.ops) {
      ops.emplace_back(ordo::name(o));
      match |= op == o;
    }
    if (!match) continue;
    for (ordo::ScalarType t : n.dtypes) dtypes.emplace_back(ordo::name(t));
    fmt::print("{:<22} {:<11} [{}] [{}]\n    {}\n", n.name,
               n.device_only ? "device-only" : n.unverified ? "unverified" : n.reproduces_reference ? "exact" : "", fmt::join(ops, ","),
               fmt::join(dtypes, ","), n.description);
    // Which (op, dtype) kernels call CUDA's own approximations: those run on target cuda only.
    std::vector<std::string> device_only;
    std::string device_fns;
    for (ordo::OpKind o : n.ops)
      for (ordo::ScalarType t : n.dtypes) {
        ordo::Request r;
        r.op = o;
        // 68: a tail for every lane count below it, and a multiple of 4 (torch-cuda's layer_norm).
        r.cols = o == ordo::OpKind::attention ? 32 : 68;
        r.target = n.device_only ? ordo::Target::cuda : ordo::Target::cpu;
        r.seq_q = r.seq_k = o == ordo::OpKind::attention ? 9 : 0;
        r.x_dtype = t;
        r.order = std::string(n.name);
        r.has_weight = o == ordo::OpKind::layer_norm || o == ordo::OpKind::rms_norm;
        r.has_bias = o == ordo::OpKind::layer_norm;
        const ordo::ir::Kernel k = ordo::gen::build(r, ordo::gen::resolve(r));
        if (std::vector<std::string> d = ordo::cuda_backend::device_calls(k); !d.empty()) {
          device_only.push_back(fmt::format("{} {}", ordo::name(o), ordo::name(t)));
          for (const std::string& f : d)
            if (device_fns.find(f) == std::string::npos) device_fns += (device_fns.empty() ? "" : ", ") + f;
        }
      }
    if (!device_only.empty())
      fmt::print("    device-only (calls {}, CUDA's approximations with no definition off the GPU; target cuda only): {}\n", device_fns,
                 fmt::join(device_only, "; "));
  }
  return 0;
}

// Fails before any work when `path` cannot be created: its directory must exist.
void check_output_path(const std::string& option, const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !fs::is_directory(parent, ec))
    throw Error(fmt::format("{} {}: directory '{}' does not exist", option, path, parent.string()));
  if (fs::is_directory(path, ec)) throw Error(fmt::format("{} {}: is a directory", option, path));
}

// A progress callback that stays silent for the first second, then reports each step on
// stderr: one line rewritten in place on a terminal, one line per step otherwise.
std::function<void(size_t, size_t, const std::string&)> progress_line(std::string what) {
  const auto start = std::chrono::steady_clock::now();
  const bool tty = isatty(fileno(stderr));
  return [=](size_t done, size_t total, const std::string& item) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s < 1.0) return;
    const std::string line = item.empty() ? fmt::format("{}: {}/{} done in {:.1f} s", what, done, total, s)
                                          : fmt::format("{}: {}/{} {:.1f} s, running {}", what, done, total, s, item);
    if (tty) fmt::print(stderr, "\r\033[K{}{}", line, item.empty() ? "\n" : "");
    else fmt::print(stderr, "{}\n", line);
  };
}

std::vector<std::string> default_orders(ordo::OpKind op) {
  std::vector<std::string> out;
  for (const ordo::gen::NamedOrder& n : ordo::gen::named_orders())
    for (ordo::OpKind o : n.ops)
      if (o == op && !n.device_only) out.emplace_back(n.name);  // device-only orders run on a GPU alone
  return out;
}

int compare(const Args& a, ordo::OpKind op, int64_t default_rows) {
  ordo::CompareOptions o;
  o.base = request_from(a, op);
  if (o.base.cols == 0) o.base.cols = 4096;
  o.rows = a.get("rows") ? parse_int("--rows", *a.get("rows"), 1, int64_t(1) << 24) : default_rows;
  if (auto v = a.get("seed")) o.seed = static_cast<uint64_t>(parse_int("--seed", *v, 0, INT64_MAX));
  if (auto v = a.get("offset")) o.offset = parse_double("--offset", *v);
  if (auto v = a.get("scale")) o.scale = parse_double("--scale", *v);
  if (auto v = a.get("repeats")) o.repeats = static_cast<int>(parse_int("--repeats", *v, 1, 1000));
  o.orders = a.get("orders") ? split(*a.get("orders"), ',')
             : op == ordo::OpKind::attention
                 ? std::vector<std::string>{"torch1.13-cpu-math", "exact-tiled", "flash(16)", "flash(32)", "flash(64)", "flash(128)",
                                            "flash(256)", "fast"}
                 : default_orders(op);
  if (op == ordo::OpKind::attention) {  // a drift study that runs in seconds, float64 reference included
    if (!a.get("cols")) o.base.cols = 64;
    if (!a.get("sq") && !a.get("sk")) o.base.seq_q = o.base.seq_k = 512;
    if (!a.get("rows")) o.rows = 4;
  }
  // Bad orders fail the command up front rather than appearing as a row of the table.
  for (const std::string& name : o.orders) {
    ordo::Request r = o.base;
    r.order = name;
    ordo::gen::resolve(r);
  }
  std::optional<std::string> plot = a.get("plot");
  if (plot) check_output_path("--plot", *plot);
  o.progress = progress_line("compare");
  ordo::CompareReport rep = ordo::compare_orders(o);
  fmt::print("{}", ordo::format_report(rep));
  if (plot && std::all_of(rep.results.begin(), rep.results.end(), [](const ordo::OrderResult& r) { return r.error.empty(); })) {
    std::vector<ordo::UlpHistogramPanel> panels;
    for (const ordo::OrderResult& r : rep.results) panels.push_back({r.order, r.primary_ulps});
    ordo::write_ulp_histogram_png(*plot, fmt::format("ordo compare {}: ULP distance of {} from float64, N={} rows={} {}", ordo::name(op),
                                                     rep.primary, o.base.cols, o.rows, ordo::name(o.base.x_dtype)), panels);
    fmt::print("\nwrote {}\n", *plot);
  }
  for (const ordo::OrderResult& r : rep.results)
    if (!r.error.empty()) {
      fmt::print(stderr, "ordo: internal error: order {} failed: {}\n", r.order, r.error);
      return 1;
    }
  return 0;
}

int cmd_compare(int argc, char** argv) {
  std::vector<std::string> values = kRequestValues;
  values.insert(values.end(), {"orders", "rows", "seed", "offset", "scale", "repeats", "plot"});
  Args a = Args::parse(argc, argv, 2, kRequestFlags, values);
  if (a.get("order")) throw Error("compare takes --orders a,b,...");
  return compare(a, parse_op_arg(a), 64);
}

int cmd_demo(int argc, char** argv) {
  std::vector<std::string> values = kRequestValues;
  values.insert(values.end(), {"orders", "rows", "seed", "offset", "scale", "repeats"});
  Args a = Args::parse(argc, argv, 2, kRequestFlags, values);
  if (!a.positional.empty()) throw Error(fmt::format("unexpected argument '{}'", a.positional[0]));
  fmt::print("ordo demo: one layer_norm request, every order; host {}\n\n", ordo::llvm_backend::host_description());
  a.positional = {"layer_norm"};
  return compare(a, ordo::OpKind::layer_norm, 256);
}

int cmd_emit(int argc, char** argv) {
  Args a = Args::parse(argc, argv, 2, [] {
    auto f = kRequestFlags;
    f.insert(f.end(), {"ir", "llvm", "cuda", "ptx"});
    return f;
  }(), kRequestValues);
  const ordo::OpKind op = parse_op_arg(a);
  ordo::Request r = request_from(a, op);
  if (r.cols == 0 && !a.get("cols")) r.cols = 1024;
  if (a.flag("ir") + a.flag("llvm") + a.flag("cuda") + a.flag("ptx") != 1)
    throw Error("emit needs exactly one of --ir, --llvm, --cuda or --ptx");
  // CUDA source and PTX are for target cuda. So is the IR of a device-only order: it prints
  // the kernel the GPU would run (nothing runs here).
  const ordo::gen::NamedOrder* named = ordo::gen::find_order(r.order);
  if (a.flag("cuda") || a.flag("ptx") || (a.flag("ir") && named && named->device_only)) r.target = ordo::Target::cuda;
  ordo::ir::Order order = ordo::gen::resolve(r);
  ordo::ir::Kernel k = ordo::gen::build(r, order);
  if (std::string err = ordo::ir::verify(k); !err.empty()) throw Error("internal: " + err);
  if (a.flag("cuda") || a.flag("ptx")) {
    // The CUDA source (or NVRTC's PTX for sm_<arch>), then ptxas's register and spill line.
    const ordo::cuda_backend::Source src = ordo::cuda_backend::render(k);
    if (!ordo::cuda_backend::nvrtc_available()) {
      if (a.flag("ptx")) ordo::cuda_backend::compile(src, r.cuda_arch, false, true);  // throws: says what is missing
      fmt::print("{}// ptxas: not run (this ordo was built without NVRTC)\n", src.text);
      return 0;
    }
    const ordo::cuda_backend::Compiled c = ordo::cuda_backend::compile(src, r.cuda_arch, true, true);
    fmt::print("{}// sm_{} {}\n", a.flag("cuda") ? src.text : c.ptx, r.cuda_arch, c.ptxas.line);
    return 0;
  }
  ordo::llvm_backend::Options options;
  options.rows_in_flight = r.rows_in_flight;
  fmt::print("{}", a.flag("ir") ? ordo::ir::print(k) : ordo::llvm_backend::emit_llvm_ir(k, options));
  return 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::optional<std::string>(v) : std::nullopt;
}
void restore_env(const char* name, const std::optional<std::string>& v) {
  if (v) ::setenv(name, v->c_str(), 1);
  else ::unsetenv(name);
}

// ordo cache stats|clear: the persistent kernel cache (include/ordo/disk_cache.hpp).
int cmd_cache(int argc, char** argv) {
  Args a = Args::parse(argc, argv, 2, {}, {});
  if (a.positional.size() != 1 || (a.positional[0] != "stats" && a.positional[0] != "clear"))
    throw Error("usage: ordo cache stats|clear");
  const ordo::disk_cache::Settings s = ordo::disk_cache::settings();
  if (a.positional[0] == "clear") {
    const uint64_t n = ordo::disk_cache::clear();
    fmt::print("removed {} entries from {}\n", n, s.dir);
    return 0;
  }
  const ordo::disk_cache::Usage u = ordo::disk_cache::usage();
  fmt::print("directory  {}\nenabled    {}\nentries    {}\nsize       {:.2f} MiB of {:.0f} MiB (least recently used evicted past it)\n",
             s.dir, s.enabled ? "yes" : "no (ORDO_CACHE=0)", u.entries, static_cast<double>(u.bytes) / (1 << 20),
             static_cast<double>(s.max_bytes) / (1 << 20));
  return 0;
}

// A C identifier from an order name: "torch1.13-cpu-avx2" -> "torch1_13_cpu_avx2".
std::string c_identifier(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Runs argv[0] with argv (no shell); returns its exit status, or -1 if it could not start.
int run_program(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)  // interrupted by a signal: wait again
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Writes each (path, bytes) to a temporary beside it, then renames them all into place: every
// file appears, or (on any failure) none.
void write_files_atomic(const std::vector<std::pair<std::filesystem::path, std::string>>& files) {
  namespace fs = std::filesystem;
  const std::string tag = fmt::format(".tmp.{}", ::getpid());
  std::vector<fs::path> temps;
  try {
    for (const auto& [path, bytes] : files) {
      temps.push_back(path.string() + tag);
      std::ofstream out(temps.back(), std::ios::binary);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      if (!out) throw Error(fmt::format("cannot write {}", path.string()));
    }
    for (size_t i = 0; i < files.size(); ++i) fs::rename(temps[i], files[i].first);
  } catch (...) {
    std::error_code ec;
    for (const fs::path& t : temps) fs::remove(t, ec);
    throw;
  }
}

// ordo build <op> --order NAME --cols N ... --target cuda [--arch sm_90] -o k.cubin (or --ptx
// -o k.ptx): NVRTC's cubin (or PTX) of one kernel, and k.json beside it: the entry name, the
// launch configuration, the parameters in order with their C types and lengths, ptxas's
// register and spill counts, and the request. Both files appear together or not at all.
int build_cuda(Args& a, ordo::OpKind op) {
  namespace fs = std::filesystem;
  const bool ptx = a.flag("ptx");
  const char* ext = ptx ? ".ptx" : ".cubin";
  if (!a.get("o")) throw Error(fmt::format("missing -o NAME{}", ext));
  const fs::path bin = *a.get("o");
  if (bin.extension() != ext)
    throw Error(fmt::format("-o {}: {} output must end in {}", bin.string(), ptx ? "PTX (--ptx)" : "cubin", ext));
  check_output_path("-o", bin.string());
  if (a.get("orders")) throw Error("--target cuda builds one kernel per file: give --order NAME");
  ordo::Request r = request_from(a, op);
  if (!a.get("cols")) throw Error("missing --cols N (the reduced dim is fixed at compile time)");
  if (!a.get("order")) throw Error("missing --order NAME");
  ordo::ir::Order o = ordo::gen::resolve(r);
  ordo::ir::Kernel k = ordo::gen::build(r, o);
  if (std::string err = ordo::ir::verify(k); !err.empty()) throw Error("internal: " + err);
  const ordo::cuda_backend::Source src = ordo::cuda_backend::render(k);
  const ordo::cuda_backend::Compiled c = ordo::cuda_backend::compile(src, r.cuda_arch, !ptx, true);

  // Parameters: the argument buffers (scratch buffers are not arguments), then each grid
  // extent (dim 0 the launch's rows, the others fixed at compile time), then the instance count.
  std::vector<const ordo::ir::Buffer*> arguments;
  for (const ordo::ir::Buffer& b : k.buffers)
    if (ordo::ir::is_argument(b)) arguments.push_back(&b);
  int64_t fixed_instances = 1;
  for (int64_t e : k.grid_fixed) fixed_instances *= e;
  const std::string instances = fixed_instances == 1 ? "rows" : fmt::format("rows*{}", fixed_instances);
  std::string params;
  for (size_t i = 0; i < src.params.size(); ++i) {
    const std::string& decl = src.params[i];
    const std::string pname = decl.substr(decl.rfind(' ') + 1);
    std::string what;
    if (i < arguments.size()) {
      const ordo::ir::Buffer& b = *arguments[i];
      const std::string len = b.extent == ordo::ir::Extent::rows_by_cols    ? fmt::format("rows*{}", r.cols)
                              : b.extent == ordo::ir::Extent::cols          ? fmt::format("{}", r.cols)
                              : b.extent == ordo::ir::Extent::rows_by_fixed ? fmt::format("rows*{}", b.per_row)
                                                                            : "rows";
      what = fmt::format("\"buffer\": {}, \"dtype\": \"{}\", \"elements\": \"{}\", \"output\": {}, \"align_bytes\": {}",
                         json_string(b.name), ordo::name(b.elem), len, b.output ? "true" : "false", src.buffer_align[i]);
    } else if (const size_t d = i - arguments.size(); d < static_cast<size_t>(k.grid_rank)) {
      what = d == 0 ? "\"value\": \"rows\"" : fmt::format("\"value\": {}", k.grid_fixed.at(d - 1));
    } else {
      what = fmt::format("\"value\": \"{}\"", instances);
    }
    params += fmt::format("{}\n        {{\"name\": {}, \"c_type\": {}, {}}}", i ? "," : "", json_string(pname),
                          json_string(src.param_types[i]), what);
  }
  std::string options;
  for (const std::string& opt : c.options) options += (options.empty() ? "" : ", ") + json_string(opt);
  const fs::path manifest = fs::path(bin).replace_extension(".json");
  const std::string m = fmt::format(
      "{{\n  \"binary\": {},\n  \"format\": \"{}\",\n  \"target\": \"cuda\",\n  \"arch\": \"sm_{}\",\n  \"nvrtc\": \"{}\",\n"
      "  \"nvrtc_options\": [{}],\n  \"kernels\": [\n    {{\n      \"name\": {},\n"
      "      \"launch\": {{\"block\": [{}, 1, 1], \"grid\": [\"ceil({} / {})\", 1, 1], \"shared_bytes\": 0, "
      "\"mapping\": \"{}\"}},\n"
      "      \"params\": [{}\n      ],\n"
      "      \"ptxas\": {{\"registers\": {}, \"stack_frame_bytes\": {}, \"spill_stores_bytes\": {}, \"spill_loads_bytes\": {}}},\n"
      "      \"request\": {{\"op\": \"{}\", \"order\": {}, \"cols\": {}, \"x_dtype\": \"{}\", \"weight_dtype\": \"{}\", "
      "\"eps\": {}, \"key\": {}}}\n    }}\n  ]\n}}\n",
      json_string(bin.filename().string()), ptx ? "ptx" : "cubin", r.cuda_arch, ordo::cuda_backend::nvrtc_version(), options,
      json_string(src.entry), src.block_threads, instances, src.instances_per_block,
      src.instances_per_block == 1 ? "one block per instance: instance = blockIdx.x (static __shared__ memory is in the binary), rows >= 1"
                                   : "one thread per instance: instance = blockIdx.x * blockDim.x + threadIdx.x, rows >= 1",
      params, c.ptxas.registers,
      c.ptxas.stack_frame, c.ptxas.spill_stores, c.ptxas.spill_loads, ordo::name(op), json_string(r.order), r.cols,
      ordo::name(r.x_dtype), ordo::name(r.weight_type()), r.eps, json_string(r.key()));
  write_files_atomic({{bin, ptx ? c.ptx : c.cubin}, {manifest, m}});
  fmt::print("wrote {} ({} for sm_{}, entry {}), {}; {}\n", bin.string(), ptx ? "PTX" : "cubin", r.cuda_arch, src.entry,
             manifest.string(), c.ptxas.line);
  return 0;
}

// ordo build <op> --orders a,b --cols N ... --target cpu -o libNAME.so: machine code for the
// host, linked into a shared library that needs no LLVM, with a C header declaring each
// kernel and a JSON manifest (launch, arguments, request) beside it. All three files appear
// together or not at all.
int cmd_build(int argc, char** argv) {
  std::vector<std::string> values = kRequestValues;
  values.insert(values.end(), {"orders", "o"});
  std::vector<std::string> words(argv, argv + argc);  // `-o FILE` is spelled the compiler way
  std::vector<char*> args;
  for (std::string& w : words) {
    if (w == "-o") w = "--o";
    args.push_back(w.data());
  }
  std::vector<std::string> flags = kRequestFlags;
  flags.push_back("ptx");
  Args a = Args::parse(argc, args.data(), 2, flags, values);
  const ordo::OpKind op = parse_op_arg(a);
  const std::string target = a.get("target").value_or("cpu");
  if (target == "cuda") return build_cuda(a, op);
  if (!a.get("o")) throw Error("missing -o libNAME.so");
  if (target != "cpu") throw Error(fmt::format("build --target '{}': cpu (a .so) or cuda (a .cubin or .ptx)", target));
  if (a.flag("ptx")) throw Error("--ptx is for --target cuda");
  a.values.erase("target");
  ordo::Request base = request_from(a, op);
  if (!a.get("cols")) throw Error("missing --cols N (the reduced dim is fixed at compile time)");
  if (a.get("order") && a.get("orders")) throw Error("give --order NAME or --orders a,b,..., not both");
  const std::vector<std::string> orders =
      a.get("orders") ? split(*a.get("orders"), ',') : std::vector<std::string>{a.get("order").value_or("")};
  if (orders.empty() || orders[0].empty()) throw Error("missing --order NAME (or --orders a,b,...)");

  namespace fs = std::filesystem;
  const fs::path so = *a.get("o");
  if (so.extension() != ".so") throw Error(fmt::format("-o {}: the library name must end in .so", so.string()));
  check_output_path("-o", so.string());
  const fs::path header = fs::path(so).replace_extension(".h"), manifest = fs::path(so).replace_extension(".json");
  const std::string guard = "ORDO_" + c_identifier(so.stem().string()) + "_H";

  struct Built {
    std::string name;
    ordo::Request request;
    ordo::ir::Kernel kernel;
    ordo::llvm_backend::Object object;
  };
  std::vector<Built> kernels;
  for (const std::string& order : orders) {
    ordo::Request r = base;
    r.order = order;
    ordo::ir::Order o = ordo::gen::resolve(r);
    ordo::ir::Kernel k = ordo::gen::build(r, o);
    if (std::string err = ordo::ir::verify(k); !err.empty()) throw Error("internal: " + err);
    ordo::llvm_backend::Options options;
    options.rows_in_flight = r.rows_in_flight;
    options.position_independent = true;
    options.symbol = fmt::format("ordo_{}_{}_n{}_{}", ordo::name(op), c_identifier(order), r.cols, ordo::name(r.x_dtype));
    if (op == ordo::OpKind::attention)  // one library may hold several shapes
      options.symbol += fmt::format("_sq{}_sk{}{}", r.seq_q, r.seq_k, r.causal ? "_causal" : "");
    for (const Built& b : kernels)
      if (b.name == options.symbol) throw Error(fmt::format("order '{}' is listed twice", order));
    kernels.push_back({options.symbol, r, k, ordo::llvm_backend::compile_object(k, options)});
  }

  // Everything goes to temporaries beside the outputs first; renamed only when all succeeded.
  const std::string tag = fmt::format(".tmp.{}", ::getpid());
  std::vector<fs::path> temps;
  auto cleanup = [&] {
    std::error_code ec;
    for (const fs::path& t : temps) fs::remove(t, ec);
  };
  try {
    std::vector<std::string> link = {"cc", "-shared", "-o", so.string() + tag};
    temps.push_back(so.string() + tag);
    for (const Built& b : kernels) {
      const fs::path obj = so.string() + tag + "." + b.name + ".o";
      temps.push_back(obj);
      std::ofstream out(obj, std::ios::binary);
      out.write(b.object.bytes.data(), static_cast<std::streamsize>(b.object.bytes.size()));
      if (!out) throw Error(fmt::format("-o {}: cannot write {}", so.string(), obj.string()));
      link.push_back(obj.string());
    }
    link.push_back("-lm");  // fma, roundeven, ...: LLVM calls libm where the target CPU lacks the instruction
    if (int status = run_program(link); status != 0)
      throw Error(fmt::format("linking {} failed (cc exited {}); is a C compiler installed?", so.string(), status));

    std::string h = fmt::format(
        "/* Generated by `ordo build`: machine code for {} ({}). Link with {} (and -lm).\n"
        " * Each kernel runs rows [begin, end) of a launch over `rows` rows: extents[0] = rows. Any split of\n"
        " * [0, rows) across threads gives the same bits. buffers[] follow the argument list below. */\n"
        "#ifndef {}\n#define {}\n\n#include <stdint.h>\n\n#ifdef __cplusplus\nextern \"C\" {{\n#endif\n",
        ordo::llvm_backend::host_description(), "x86-64 SysV", so.filename().string(), guard, guard);
    std::string m = fmt::format("{{\n  \"library\": {},\n  \"target\": \"cpu\",\n  \"host\": {},\n  \"kernels\": [", json_string(so.filename().string()),
                                json_string(ordo::llvm_backend::fingerprint()));
    for (size_t i = 0; i < kernels.size(); ++i) {
      const Built& b = kernels[i];
      std::string arg_doc, arg_json;
      for (size_t j = 0; j < b.kernel.buffers.size(); ++j) {
        const ordo::ir::Buffer& buf = b.kernel.buffers[j];
        if (!ordo::ir::is_argument(buf)) continue;  // scratch lives on the kernel's stack
        const std::string len = buf.extent == ordo::ir::Extent::rows_by_cols    ? fmt::format("rows*{}", b.request.cols)
                                : buf.extent == ordo::ir::Extent::cols          ? fmt::format("{}", b.request.cols)
                                : buf.extent == ordo::ir::Extent::rows_by_fixed ? fmt::format("rows*{}", buf.per_row)
                                                                                : "rows";
        arg_doc += fmt::format(" *   buffers[{}] {:<7} {}[{}] {}\n", j, buf.name, ordo::name(buf.elem), len, buf.output ? "out" : "in");
        arg_json += fmt::format("{}\n        {{\"name\": {}, \"dtype\": \"{}\", \"elements\": \"{}\", \"output\": {}}}", j ? "," : "",
                                json_string(buf.name), ordo::name(buf.elem), len, buf.output ? "true" : "false");
      }
      // Grid: dim 0 is the rows; attention adds its fixed query blocks. Instances run in
      // row-major order over [0, rows * blocks).
      std::string extents = "rows", grid = "\"rows\"", instances = "rows";
      for (int64_t e : b.kernel.grid_fixed) {
        extents += fmt::format(", {}", e);
        grid += fmt::format(", {}", e);
        instances += fmt::format(" * {}", e);
      }
      h += fmt::format(
          "\n/* {} with order {}: N = {}, x {}.\n{} */\n"
          "void {}(void* const* buffers, const int64_t* extents, int64_t begin, int64_t end, int64_t flags);\n"
          "static inline void {}_run(void* const* buffers, int64_t rows) {{\n"
          "  int64_t extents[{}] = {{{}}};\n  {}(buffers, extents, 0, {}, 0);\n}}\n",
          ordo::name(op), b.request.order, b.request.cols, ordo::name(b.request.x_dtype), arg_doc, b.name, b.name,
          1 + b.kernel.grid_fixed.size(), extents, b.name, instances);
      m += fmt::format(
          "{}\n    {{\n      \"name\": {},\n      \"signature\": \"void(void* const* buffers, const int64_t* extents, int64_t begin, "
          "int64_t end, int64_t flags)\",\n      \"launch\": {{\"grid\": [{}], \"rows_in_flight\": {}, \"flags\": {{\"1\": "
          "\"non-temporal stores for per-row outputs\"}}}},\n      \"args\": [{}\n      ],\n      \"request\": {{\"op\": \"{}\", \"order\": "
          "{}, \"cols\": {}, \"x_dtype\": \"{}\", \"weight_dtype\": \"{}\", \"eps\": {}, \"key\": {}}}\n    }}",
          i ? "," : "", json_string(b.name), grid, b.object.rows_in_flight, arg_json, ordo::name(op), json_string(b.request.order),
          b.request.cols, ordo::name(b.request.x_dtype), ordo::name(b.request.weight_type()), b.request.eps, json_string(b.request.key()));
    }
    h += "\n#ifdef __cplusplus\n}\n#endif\n\n#endif\n";
    m += "\n  ]\n}\n";
    for (const auto& [path, text] : {std::pair{header, h}, std::pair{manifest, m}}) {
      temps.push_back(path.string() + tag);
      std::ofstream out(path.string() + tag, std::ios::binary);
      out << text;
      if (!out) throw Error(fmt::format("cannot write {}", path.string()));
    }
    fs::rename(so.string() + tag, so);
    fs::rename(header.string() + tag, header);
    fs::rename(manifest.string() + tag, manifest);
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();  // the object files
  fmt::print("wrote {} ({} kernel{}), {}, {}\n", so.string(), kernels.size(), kernels.size() > 1 ? "s" : "", header.string(),
             manifest.string());
  return 0;
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
  const auto t_compile = clock::now();
  ordo::KernelHandle k = ordo::compile_uncached(r);
  const double compile_ms = since(t_compile) * 1e3;
  restore_env("ORDO_CACHE", saved_cache);
  ordo::HostBuffers h = ordo::make_buffers(*k, rows, 1, 0.0, 1.0);
  std::vector<ordo::BufferRef> refs = h.refs(rows, r.cols);
  k->run(refs, rows, threads);  // warm up
  std::vector<double> ts;
  const auto start = clock::now();
  while (ts.size() < 3 || (since(start) < budget && ts.size() < 200)) {
    auto t = clock::now();
    k->run(refs, rows, threads);
    ts.push_back(since(t));
  }
  const double tmin = *std::min_element(ts.begin(), ts.end());
  const double flops = 4.0 * static_cast<double>(rows) * static_cast<double>(r.seq_q) * static_cast<double>(r.seq_k) *
                       static_cast<double>(r.cols);
  const ordo::PeakFlops peak = a.flag("no-peak") ? ordo::PeakFlops{} : ordo::measure_fma_peak(threads);
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  fmt::print(
      "{{\"op\": \"attention\", \"order\": \"{}\", \"batch_heads\": {}, \"seq_q\": {}, \"seq_k\": {}, \"head_dim\": {}, "
      "\"causal\": {}, \"dtype\": \"{}\", \"threads\": {}, \"seconds_min\": {:.6g}, \"seconds_median\": {:.6g}, \"runs\": {}, "
      "\"gflops\": {:.3f}, \"peak_fma_gflops\": {}, \"fraction_of_peak\": {}, \"compile_ms_cold\": {:.3f}, "
      "\"peak_rss_mb\": {:.1f}, \"input_output_mb\": {:.1f}}}\n",
      r.order, rows, r.seq_q, r.seq_k, r.cols, r.causal, ordo::name(r.x_dtype), threads, tmin, median(ts), ts.size(), flops / tmin / 1e9,
      peak.available ? fmt::format("{:.3f}", peak.gflops) : "null",
      peak.available ? fmt::format("{:.4f}", flops / tmin / 1e9 / peak.gflops) : "null", compile_ms, ru.ru_maxrss / 1024.0,
      [&] {
        double b = 0;
        for (const auto& x : h.bytes) b += static_cast<double>(x.size());
        return b / (1 << 20);
      }());
  return 0;
}

int cmd_bench(int argc, char** argv) {
  std::vector<std::string> values = kRequestValues;
  values.insert(values.end(), {"rows", "threads", "baseline", "seconds"});
  auto flags = kRequestFlags;
  flags.insert(flags.end(), {"json", "no-peak"});
  Args a = Args::parse(argc, argv, 2, flags, values);
  const ordo::OpKind op = parse_op_arg(a);
  ordo::Request r = request_from(a, op);
  if (op == ordo::OpKind::attention) {
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
  std::vector<double> cold, lower, optimize, codegen, disk_hit;
  ::setenv("ORDO_CACHE", "0", 1);
  for (int i = 0; i < 7; ++i) {
    ordo::KernelHandle c = ordo::compile_uncached(r);
    cold.push_back(c->compile_ms());
    lower.push_back(c->lower_ms());
    optimize.push_back(c->optimize_ms());
    codegen.push_back(c->codegen_ms());
  }
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
  std::vector<ordo::BufferRef> refs = h.refs(rows, r.cols);
  double bytes = 0;
  for (const auto& b : h.bytes) bytes += static_cast<double>(b.size());
  // With a baseline, kernel and baseline runs alternate in one loop, so both see the same
  // machine state (other load, frequency, memory traffic); each reports its fastest run.
  std::vector<uint8_t>& src = h.get("x");
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
      tmin, median(ts), ts.size(), median(cold), median(lower), median(optimize), median(codegen), median(disk_hit), hit_us,
      extra);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    fmt::print("{}", kUsage);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "run") return cmd_run(argc, argv);
    if (cmd == "orders") return cmd_orders(argc, argv);
    if (cmd == "compare") return cmd_compare(argc, argv);
    if (cmd == "demo") return cmd_demo(argc, argv);
    if (cmd == "emit") return cmd_emit(argc, argv);
    if (cmd == "bench") return cmd_bench(argc, argv);
    if (cmd == "cache") return cmd_cache(argc, argv);
    if (cmd == "build") return cmd_build(argc, argv);
    throw Error(fmt::format("unknown command '{}'; commands: run, orders, compare, emit, bench, demo, cache, build", cmd));
  } catch (const Error& e) {
    fmt::print(stderr, "ordo: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "ordo: internal error: {}\n", e.what());
    return 1;
  }
}
