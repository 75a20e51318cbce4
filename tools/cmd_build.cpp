// ordo build: offline kernels (.so with header and manifest; .cubin or .ptx with manifest).
#include "tools/cli.hpp"

#include <fstream>
#include "backends/cuda/cuda_backend.hpp"
#include "backends/llvm/llvm_backend.hpp"
#include "gen/gen.hpp"
#include "ir/ir.hpp"

namespace ordo::cli {

const char* const kBuildHelp = R"(usage: ordo build <op> --order NAME|--orders a,b,... --cols N [options] -o libNAME.so
       ordo build <op> --order NAME --cols N --target cuda [--arch sm_90] -o k.cubin | --ptx -o k.ptx

  -o FILE               the output: libNAME.so (+ libNAME.h, libNAME.json), or k.cubin/k.ptx (+ k.json)  -o libln.so
  --orders a,b,...      several orders in one .so                --orders torch2.15-cpu,fast
  --ptx                 target cuda: PTX instead of a cubin      --ptx -o k.ptx
All files appear together, or none of them.

examples:
  ordo build layer_norm --orders torch2.15-cpu-avx2,fast --cols 4096 -o libln.so
  ordo build layer_norm --order fast --cols 4096 --target cuda --arch sm_90 -o k.cubin
)";

namespace {

// The launches a kernel refuses (ir::Kernel::refused_launches), as a JSON array: a caller of the
// built binary launches it itself, so it must leave these row counts out.
// A buffer's length for a launch of `rows` rows, as the header and manifest state it.
std::string length_text(const ordo::ir::Kernel& k, const ordo::ir::Buffer& b, const ordo::Request& r) {
  using ordo::ir::Extent;
  // N given at launch is the size argument "N" (Request::cols_at_launch).
  const std::string cols = r.cols_at_launch ? std::string("N") : fmt::format("{}", r.cols);
  switch (b.extent) {
    case Extent::rows_by_cols: return fmt::format("rows*{}", cols);
    case Extent::cols: return fmt::format("{}", cols);
    case Extent::rows_by_fixed:
      if (b.per_row_size >= 0) return fmt::format("rows*{}*{}", b.per_row, k.sizes.at(static_cast<size_t>(b.per_row_size)));
      return fmt::format("rows*{}", b.per_row);
    case Extent::row_blocks:
    case Extent::row_groups:
      if (b.per_row_size >= 0) return fmt::format("ceil(rows/{})*{}*{}", b.block_rows, b.per_row, k.sizes.at(static_cast<size_t>(b.per_row_size)));
      return fmt::format("ceil(rows/{})*{}", b.block_rows, b.per_row);
    case Extent::fixed:
      if (b.per_row_size >= 0) return fmt::format("{}*{}", b.per_row, k.sizes.at(static_cast<size_t>(b.per_row_size)));
      return fmt::format("{}", b.per_row);
    case Extent::rows: return "rows";
    case Extent::scratch: break;
  }
  throw Error(fmt::format("internal: scratch buffer {} is not an argument", b.name));
}

std::string refusals_json(const ordo::ir::Kernel& k) {
  std::string items;
  for (const ordo::ir::Kernel::RefusedLaunch& r : k.refused_launches)
    items += fmt::format("{}{{\"when\": {}, \"why\": {}}}", items.empty() ? "" : ", ", json_string(r.condition()), json_string(r.why));
  return "[" + items + "]";
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
  if (!a.get("cols")) throw Error("missing --cols N (the reduced dim, fixed at compile time; --cols launch: given at each launch)");
  if (!a.get("order")) throw Error("missing --order NAME");
  std::vector<std::string> options_json;
  ordo::ir::Order o = ordo::gen::resolve(r);
  // An op of several kernels (a backward op's weight gradients) writes one binary per stage:
  // k.cubin, then k.stage2.cubin, ..., launched in that order over the same buffers.
  const std::vector<ordo::ir::Kernel> stages = ordo::gen::build_stages(r, o);
  std::vector<std::pair<fs::path, std::string>> files;
  std::string kernels_json, summary;
  for (size_t stage = 0; stage < stages.size(); ++stage) {
    const ordo::ir::Kernel& k = stages[stage];
    const fs::path stage_bin =
        stage == 0 ? bin : fs::path(bin).replace_filename(bin.stem().string() + fmt::format(".stage{}", stage + 1) + ext);
    if (std::string err = ordo::ir::verify(k); !err.empty()) throw Error("internal: " + err);
    const ordo::cuda_backend::Source src = ordo::cuda_backend::render(k);
    const ordo::cuda_backend::Compiled c = ordo::cuda_backend::compile(src, r.cuda_arch, !ptx, true);

    // Parameters: the argument buffers (scratch buffers are not arguments), then each grid
    // extent (dim 0 the launch's rows, the others fixed at compile time; a column stage's all
    // fixed), the launch's rows, then the instance count.
    std::vector<const ordo::ir::Buffer*> arguments;
    for (const ordo::ir::Buffer& b : k.buffers)
      if (ordo::ir::is_argument(b)) arguments.push_back(&b);
    int64_t fixed_instances = 1;
    for (int64_t e : k.grid_fixed) fixed_instances *= e;
    const std::string row_dim = k.rows_per_instance > 1 ? fmt::format("ceil(rows/{})", k.rows_per_instance) : "rows";
    const std::string instances = !k.grid_over_rows ? fmt::format("{}", fixed_instances)
                                  : fixed_instances == 1 ? row_dim
                                                         : fmt::format("{}*{}", row_dim, fixed_instances);
    std::string params;
    for (size_t i = 0; i < src.params.size(); ++i) {
      const std::string& decl = src.params[i];
      const std::string pname = decl.substr(decl.rfind(' ') + 1);
      std::string what;
      if (i < arguments.size()) {
        const ordo::ir::Buffer& b = *arguments[i];
        const std::string len = length_text(k, b, r);
        what = fmt::format("\"buffer\": {}, \"dtype\": \"{}\", \"elements\": \"{}\", \"output\": {}, \"align_bytes\": {}",
                           json_string(b.name), ordo::name(b.elem), len, b.output ? "true" : "false", src.buffer_align[i]);
      } else if (const size_t d = i - arguments.size(); d < static_cast<size_t>(k.grid_rank)) {
        const bool rows_dim = k.grid_over_rows && d == 0;
        what = rows_dim ? fmt::format("\"value\": \"{}\"", row_dim) : fmt::format("\"value\": {}", k.grid_fixed.at(k.grid_over_rows ? d - 1 : d));
      } else if (d == static_cast<size_t>(k.grid_rank)) {
        what = "\"value\": \"rows\"";  // launch_rows
      } else if (const size_t size = d - static_cast<size_t>(k.grid_rank) - 1; size < k.sizes.size()) {
        what = fmt::format("\"value\": {}", json_string(k.sizes[size]));  // launch_size: given at each launch
      } else {
        what = fmt::format("\"value\": \"{}\"", instances);
      }
      params += fmt::format("{}\n        {{\"name\": {}, \"c_type\": {}, {}}}", i ? "," : "", json_string(pname),
                            json_string(src.param_types[i]), what);
    }
    kernels_json += fmt::format(
        "{}    {{\n      \"name\": {},\n      \"binary\": {},\n      \"stage\": {},\n"
        "      \"launch\": {{\"block\": [{}, 1, 1], \"grid\": [\"ceil({} / {})\", 1, 1], \"shared_bytes\": 0, "
        "\"mapping\": \"{}\"}},\n"
        "      \"params\": [{}\n      ],\n"
        "      \"refuses\": {},\n"
        "      \"ptxas\": {{\"registers\": {}, \"stack_frame_bytes\": {}, \"spill_stores_bytes\": {}, \"spill_loads_bytes\": {}}},\n"
        "      \"request\": {{\"op\": \"{}\", \"order\": {}, \"cols\": {}, \"x_dtype\": \"{}\", \"weight_dtype\": \"{}\", "
        "\"eps\": {}, \"key\": {}}}\n    }}",
        stage ? ",\n" : "", json_string(src.entry), json_string(stage_bin.filename().string()), stage + 1, src.block_threads, instances,
        src.instances_per_block,
        src.instances_per_block == 1 ? "one block per instance: instance = blockIdx.x (static __shared__ memory is in the binary), rows >= 1"
                                     : "one thread per instance: instance = blockIdx.x * blockDim.x + threadIdx.x, rows >= 1",
        params, refusals_json(k), c.ptxas.registers, c.ptxas.stack_frame, c.ptxas.spill_stores, c.ptxas.spill_loads, ordo::name(op),
        json_string(r.order), r.cols, ordo::name(r.x_dtype), ordo::name(r.weight_type()), r.eps, json_string(r.key()));
    files.emplace_back(stage_bin, ptx ? c.ptx : c.cubin);
    summary += fmt::format("{}{} (entry {}; {})", stage ? ", " : "", stage_bin.string(), src.entry, c.ptxas.line);
    if (stage == 0) options_json = c.options;
  }
  std::string options;
  for (const std::string& opt : options_json) options += (options.empty() ? "" : ", ") + json_string(opt);
  const fs::path manifest = fs::path(bin).replace_extension(".json");
  // Stages run in the order listed, each after the previous has finished, over the same buffers.
  const std::string m = fmt::format(
      "{{\n  \"binary\": {},\n  \"format\": \"{}\",\n  \"target\": \"cuda\",\n  \"arch\": \"sm_{}\",\n  \"nvrtc\": \"{}\",\n"
      "  \"nvrtc_options\": [{}],\n  \"kernels\": [\n{}\n  ]\n}}\n",
      json_string(bin.filename().string()), ptx ? "ptx" : "cubin", r.cuda_arch, ordo::cuda_backend::nvrtc_version(), options,
      kernels_json);
  files.emplace_back(manifest, m);
  write_files_atomic(files);
  fmt::print("wrote {} for sm_{}: {}; {}\n", ptx ? "PTX" : "cubin", r.cuda_arch, summary, manifest.string());
  return 0;
}

}  // namespace

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
  if (!a.get("cols")) throw Error("missing --cols N (the reduced dim, fixed at compile time; --cols launch: given at each launch)");
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

  // One entry per kernel; an op of several stages has one per stage, and its _run helper (after
  // its last stage) launches them in turn.
  struct Built {
    std::string name;
    ordo::Request request;
    ordo::ir::Kernel kernel;
    ordo::llvm_backend::Object object;
    std::string op_name;  // the op's symbol: the first stage's name
    size_t stage = 0, stages = 1;
  };
  std::vector<Built> kernels;
  for (const std::string& order : orders) {
    ordo::Request r = base;
    r.order = order;
    ordo::ir::Order o = ordo::gen::resolve(r);
    const std::vector<ordo::ir::Kernel> stages = ordo::gen::build_stages(r, o);
    const std::string n_part = r.cols_at_launch ? std::string("nlaunch") : fmt::format("n{}", r.cols);
    std::string op_symbol = fmt::format("ordo_{}_{}_{}_{}", ordo::name(op), c_identifier(order), n_part, ordo::name(r.x_dtype));
    if (op == ordo::OpKind::attention)  // one library may hold several shapes
      op_symbol += fmt::format("_sq{}_sk{}{}", r.seq_q, r.seq_k, r.causal ? "_causal" : "");
    for (const Built& b : kernels)
      if (b.op_name == op_symbol) throw Error(fmt::format("order '{}' is listed twice", order));
    for (size_t s = 0; s < stages.size(); ++s) {
      const ordo::ir::Kernel& k = stages[s];
      if (std::string err = ordo::ir::verify(k); !err.empty()) throw Error("internal: " + err);
      ordo::llvm_backend::Options options;
      options.rows_in_flight = r.rows_in_flight;
      options.position_independent = true;
      options.symbol = s == 0 ? op_symbol : fmt::format("{}_stage{}", op_symbol, s + 1);
      kernels.push_back({options.symbol, r, k, ordo::llvm_backend::compile_object(k, options), op_symbol, s, stages.size()});
    }
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
        " * Each kernel runs program instances [begin, end) of a launch over `rows` rows; extents[] holds its grid's\n"
        " * extents, then rows, then its size arguments (lengths given at launch, named in the kernel's comment). A kernel over rows has instances [0, rows * fixed dims), or over blocks of rows\n"
        " * [0, ceil(rows / block) * fixed dims); a column stage (a backward op's weight gradients) has its fixed\n"
        " * extents alone. Any split of the instances across threads gives the same bits. An op of several stages\n"
        " * runs them in order, each over the whole launch (its _run does). buffers[] follow the argument list\n"
        " * below; a workspace, the working memory the stages share, comes last (_run allocates it). */\n"
        "#ifndef {}\n#define {}\n\n#include <stdint.h>\n#include <stdlib.h>\n\n#ifdef __cplusplus\nextern \"C\" {{\n#endif\n",
        ordo::llvm_backend::host_description(), "x86-64 SysV", so.filename().string(), guard, guard);
    std::string m = fmt::format("{{\n  \"library\": {},\n  \"target\": \"cpu\",\n  \"host\": {},\n  \"kernels\": [", json_string(so.filename().string()),
                                json_string(ordo::llvm_backend::fingerprint()));
    std::string op_run;  // the body of the current op's _run, one block per stage
    for (size_t i = 0; i < kernels.size(); ++i) {
      const Built& b = kernels[i];
      std::string arg_doc, arg_json;
      for (size_t j = 0; j < b.kernel.buffers.size(); ++j) {
        const ordo::ir::Buffer& buf = b.kernel.buffers[j];
        if (!ordo::ir::is_argument(buf)) continue;  // scratch lives on the kernel's stack
        const std::string len = length_text(b.kernel, buf, b.request);
        const bool workspace = ordo::ir::is_workspace(buf);
        arg_doc += fmt::format(" *   buffers[{}] {:<7} {}[{}] {}\n", j, buf.name, ordo::name(buf.elem), len,
                               workspace ? "workspace: the caller allocates it, any contents, shared by the op's stages" : buf.output ? "out" : "in");
        arg_json += fmt::format("{}\n        {{\"name\": {}, \"dtype\": \"{}\", \"elements\": \"{}\", \"output\": {}{}}}", j ? "," : "",
                                json_string(buf.name), ordo::name(buf.elem), len, buf.output ? "true" : "false",
                                workspace ? ", \"workspace\": true" : "");
      }
      // Grid: dim 0 is the rows, and attention adds its fixed query blocks; a column stage's grid
      // is fixed. Instances run in row-major order. The launch's rows follow the extents.
      std::string extents, grid, instances;
      if (b.kernel.grid_over_rows) {
        const int64_t per = b.kernel.rows_per_instance;  // an instance per block of rows
        extents = instances = per > 1 ? fmt::format("(rows + {}) / {}", per - 1, per) : "rows";
        grid = per > 1 ? fmt::format("ceil(rows/{})", per) : "rows";
      }
      for (int64_t e : b.kernel.grid_fixed) {
        extents += fmt::format("{}{}", extents.empty() ? "" : ", ", e);
        grid += fmt::format("{}{}", grid.empty() ? "" : ", ", e);
        instances += fmt::format("{}{}", instances.empty() ? "" : " * ", e);
      }
      if (b.kernel.grid_over_rows) {
        const size_t comma = grid.find(',');
        grid = json_string(grid.substr(0, comma)) + (comma == std::string::npos ? "" : grid.substr(comma));
      }
      const std::string stage_note = b.stages > 1 ? fmt::format(", stage {} of {}", b.stage + 1, b.stages) : "";
      for (const ordo::ir::Kernel::RefusedLaunch& r : b.kernel.refused_launches)
        arg_doc += fmt::format(" * Do not launch with {}: {}.\n", r.condition(), r.why);
      h += fmt::format("\n/* {} with order {}: N = {}, x {}{}.\n{} */\n"
                       "void {}(void* const* buffers, const int64_t* extents, int64_t begin, int64_t end, int64_t flags);\n",
                       ordo::name(op), b.request.order,
                       b.request.cols_at_launch ? std::string("given at launch") : fmt::format("{}", b.request.cols),
                       ordo::name(b.request.x_dtype), stage_note, arg_doc, b.name);
      // The launch's size arguments (Kernel::sizes) follow the rows, as _run's parameters of the same names.
      std::string sizes, size_params;
      for (const std::string& size : b.kernel.sizes) {
        sizes += ", " + size;
        size_params += ", int64_t " + size;
      }
      op_run += fmt::format("  {{\n    int64_t extents[{}] = {{{}, rows{}}};\n    {}(all, extents, 0, {}, 0);\n  }}\n",
                            b.kernel.grid_fixed.size() + (b.kernel.grid_over_rows ? 2 : 1) + b.kernel.sizes.size(), extents, sizes, b.name,
                            instances);
      if (b.stage + 1 == b.stages) {
        // _run takes the op's own buffers and allocates the workspaces, which follow them.
        std::vector<const ordo::ir::Buffer*> own, workspaces;
        for (const ordo::ir::Buffer& buf : b.kernel.buffers)
          if (ordo::ir::is_workspace(buf)) workspaces.push_back(&buf);
          else if (ordo::ir::is_argument(buf)) own.push_back(&buf);
        std::string body;
        if (workspaces.empty()) {
          body = fmt::format("  void* const* all = buffers;\n{}", op_run);
        } else {
          body = fmt::format("  if (rows <= 0) return 0;\n  void* all[{}];\n  for (int i = 0; i < {}; ++i) all[i] = buffers[i];\n",
                             own.size() + workspaces.size(), own.size());
          std::string release;
          for (size_t w = 0; w < workspaces.size(); ++w) {
            const ordo::ir::Buffer& ws = *workspaces[w];
            const size_t slot = own.size() + w;
            // From a 64-byte boundary, as the JIT's runtime allocates workspaces (src/runtime.cpp):
            // malloc's 16 would split a cache line on every 64-byte vector access.
            body += fmt::format("  all[{}] = aligned_alloc(64, ((size_t)((rows + {}) / {}) * {} * {} + 63) / 64 * 64); /* {} */\n", slot,
                                ws.block_rows - 1, ws.block_rows, ws.per_row, ordo::size_bytes(ws.elem), ws.name);
            body += fmt::format("  if (!all[{}]) {{\n{}    return -1;\n  }}\n", slot, release);
            release += fmt::format("    free(all[{}]);\n", slot);
          }
          body += op_run;
          for (size_t w = 0; w < workspaces.size(); ++w) body += fmt::format("  free(all[{}]);\n", own.size() + w);
        }
        h += fmt::format("/* Runs every stage over `rows` rows: buffers[] holds the op's own arguments{}. Returns 0, or -1 when\n"
                         " * a workspace cannot be allocated. */\n"
                         "static inline int {}_run(void* const* buffers, int64_t rows{}) {{\n{}  return 0;\n}}\n",
                         workspaces.empty() ? "" : " (no workspace: _run allocates it)", b.op_name, size_params, body);
        op_run.clear();
      }
      m += fmt::format(
          "{}\n    {{\n      \"name\": {},\n      \"signature\": \"void(void* const* buffers, const int64_t* extents, int64_t begin, "
          "int64_t end, int64_t flags)\",\n      \"launch\": {{\"grid\": [{}], \"rows_in_flight\": {}, \"flags\": {{\"1\": "
          "\"non-temporal stores for per-row outputs\"}}}},\n      \"args\": [{}\n      ],\n      \"refuses\": {},\n      \"request\": {{\"op\": \"{}\", \"order\": "
          "{}, \"cols\": {}, \"x_dtype\": \"{}\", \"weight_dtype\": \"{}\", \"eps\": {}, \"key\": {}}}\n    }}",
          i ? "," : "", json_string(b.name), grid, b.object.rows_in_flight, arg_json, refusals_json(b.kernel), ordo::name(op), json_string(b.request.order),
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

}  // namespace ordo::cli
