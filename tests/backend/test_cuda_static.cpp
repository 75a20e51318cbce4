// Static checks of what NVRTC makes of the rendered CUDA source (needs the CUDA toolkit's NVRTC;
// no GPU): the PTX computes exactly the fmas the IR states, the f32 layer_norm and softmax kernels
// read rows with 128-bit loads, ptxas spills nothing at sm_90, every supported arch compiles to a
// cubin, and launching without a driver fails with an error naming what is missing.
#include <dlfcn.h>
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <fmt/ranges.h>

#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "backends/cuda/cuda_backend.hpp"
#include "gen/gen.hpp"
#include "ir/error.hpp"
#include "ir/interpret.hpp"
#include "ordo/compare.hpp"
#include "ordo/ordo.hpp"
#include "sweep.hpp"

using namespace ordo;

namespace {

ir::Kernel kernel_for(const Request& r) { return gen::build(r, gen::resolve(r)); }

// Lanes of the IR nodes `is` accepts, each node counted once per statement (a node shared by
// operands of one statement is computed once, in the interpreter as in every backend).
void count_lanes(const ir::Expr& e, const std::function<bool(const ir::Expr&)>& is, std::set<const ir::Expr*>& seen,
                 int64_t& n) {
  if (!seen.insert(&e).second) return;
  if (is(e)) n += e.type.lanes;
  for (const ir::ExprRef& a : e.args) count_lanes(*a, is, seen, n);
}
int64_t ir_lanes(const std::vector<ir::Stmt>& body, const std::function<bool(const ir::Expr&)>& is) {
  int64_t n = 0;
  for (const ir::Stmt& s : body) {
    std::set<const ir::Expr*> seen;
    for (const ir::ExprRef& e : {s.value, s.index, s.begin, s.end})
      if (e) count_lanes(*e, is, seen, n);
    n += ir_lanes(s.body, is) + ir_lanes(s.else_body, is);
  }
  return n;
}
// The fmas each lane of a node lowers to: one for Fma; four for Bf16PairDot (ordo_rt.cuh's
// bf16_pair_dot: per step the fma and, behind the edge test, the same fma scaled by 2^64).
int64_t ir_fma_lanes(const std::vector<ir::Stmt>& body, ScalarType t) {
  const int64_t fmas = ir_lanes(body, [t](const ir::Expr& e) { return e.op == ir::Op::Fma && e.type.scalar == t; });
  if (t != ScalarType::f32) return fmas;
  return fmas + 4 * ir_lanes(body, [](const ir::Expr& e) { return e.op == ir::Op::Bf16PairDot; });
}

int64_t count(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  return std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator());
}

// The number of distinct values the PTX's `opcode` instructions compute. PTX is numbered by value:
// an instruction's value is its opcode applied to its operands' values (a mov copies its operand's),
// so an fma NVVM recomputes near a late use (rematerialization, from the same inputs) counts once,
// while an fma made by contracting a mul and an add is a value of its own. Only what is certainly the
// same value is merged:
// - each write of a register written more than once (a loop's carried value) is a value of its own,
//   so the same arithmetic in two loops stays two values;
// - a load is keyed by its address and the number of memory writes and barriers before it;
// - a predicated instruction, a call, an atomic or a multi-register destination gives each register
//   it writes a value of its own.
struct PtxInstruction {
  std::string op;
  bool predicated = false;
  std::vector<std::string> operands;  // the destination first, where the instruction has one
};
std::vector<PtxInstruction> ptx_instructions(const std::string& ptx) {
  std::vector<PtxInstruction> out;
  std::istringstream lines(ptx);
  for (std::string line; std::getline(lines, line);) {
    line.erase(0, line.find_first_not_of(" \t"));
    const size_t semicolon = line.find(';');
    if (line.empty() || semicolon == std::string::npos || line[0] == '.' || line[0] == '/') continue;
    line.erase(semicolon);
    PtxInstruction in;
    in.predicated = line[0] == '@';
    if (in.predicated) line.erase(0, line.find_first_of(" \t"));
    std::istringstream words(line);
    words >> in.op;
    in.operands.emplace_back();  // split at the commas outside braces and parentheses
    int depth = 0;
    for (char ch; words.get(ch);) {
      if (ch == '{' || ch == '(') ++depth;
      if (ch == '}' || ch == ')') --depth;
      if (ch == ',' && depth == 0) in.operands.emplace_back();
      else if (ch != ' ' && ch != '\t') in.operands.back() += ch;
    }
    out.push_back(std::move(in));
  }
  return out;
}
bool starts(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }
bool writes_memory(const PtxInstruction& in) {
  return starts(in.op, "st.") || starts(in.op, "red.") || starts(in.op, "atom") || starts(in.op, "call") ||
         starts(in.op, "bar") || starts(in.op, "membar") || starts(in.op, "fence");
}
bool writes_registers(const PtxInstruction& in) {
  return !in.operands.front().empty() && !starts(in.op, "st.") && !starts(in.op, "bra") && !starts(in.op, "bar") &&
         !starts(in.op, "ret") && !starts(in.op, "red.") && !starts(in.op, "membar") && !starts(in.op, "fence");
}

int64_t distinct_values(const std::string& ptx, const std::string& opcode) {
  const std::vector<PtxInstruction> code = ptx_instructions(ptx);
  const std::regex reg(R"(%[A-Za-z_][A-Za-z0-9_.]*)");
  auto registers_in = [&](const std::string& operand) {
    std::vector<std::string> out;
    for (std::sregex_iterator m(operand.begin(), operand.end(), reg), end; m != end; ++m) out.push_back(m->str());
    return out;
  };
  std::map<std::string, int> writes;
  for (const PtxInstruction& in : code)
    if (writes_registers(in))
      for (const std::string& r : registers_in(in.operands.front())) ++writes[r];

  std::map<std::string, int> id_of_key;          // "opcode(v1,v2,...)" -> value
  std::map<std::string, int> value_of_register;  // register -> the value it holds at this point
  auto intern = [&](const std::string& key) { return id_of_key.emplace(key, int(id_of_key.size())).first->second; };
  int fresh = 0, memory_epoch = 0;
  auto value = [&](const std::string& operand) {  // registers replaced by their values
    std::string out;
    size_t last = 0;
    for (std::sregex_iterator m(operand.begin(), operand.end(), reg), end; m != end; ++m) {
      out += operand.substr(last, size_t(m->position()) - last);
      const auto found = value_of_register.find(m->str());
      out += found == value_of_register.end() ? m->str() : fmt::format("v{}", found->second);
      last = size_t(m->position() + m->length());
    }
    return out + operand.substr(last);
  };
  std::set<int> values;
  for (const PtxInstruction& in : code) {
    if (writes_memory(in)) ++memory_epoch;
    if (!writes_registers(in)) continue;
    const std::string& dest = in.operands.front();
    const bool pure = std::regex_match(dest, reg) && writes[dest] == 1 && !in.predicated && !starts(in.op, "call") &&
                      !starts(in.op, "atom");
    if (!pure) {  // each register written gets a value of its own; so does the instruction
      for (const std::string& r : registers_in(dest)) value_of_register[r] = intern(fmt::format("fresh#{}", fresh++));
      if (in.op == opcode) values.insert(intern(fmt::format("fresh#{}", fresh++)));
      continue;
    }
    std::string key = starts(in.op, "mov.") && in.operands.size() == 2 ? "=" : in.op + "(";
    if (starts(in.op, "ld.")) key += fmt::format("epoch {},", memory_epoch);
    for (size_t i = 1; i < in.operands.size(); ++i) key += value(in.operands[i]) + ",";
    const int v = intern(key);
    value_of_register[dest] = v;
    if (in.op == opcode) values.insert(v);
  }
  return int64_t(values.size());
}

// Every op and named order, in every dtype it takes, whose IR has a CUDA lowering (device-only orders
// included: they are compiled for target cuda; shapes an order does not take are moved to one
// it does). Attention
// takes `n` as its sequence length, with D = 32 (short) or 64 (long).
std::vector<Request> shipped(int64_t n) {
  std::vector<Request> out;
  for (const gen::NamedOrder& o : gen::named_orders())
    for (OpKind op : o.ops)
      for (ScalarType t : o.dtypes) {
        Request r;
        r.op = op;
        r.cols = n;
        r.order = std::string(o.name);
        r.x_dtype = t;
        r.has_weight = forward_of(op) == OpKind::layer_norm || forward_of(op) == OpKind::rms_norm;
        r.has_bias = forward_of(op) == OpKind::layer_norm;
        r.target = Target::cuda;
        if (forward_of(op) == OpKind::attention) {
          r.cols = n < 64 ? 32 : 64;
          r.seq_q = r.seq_k = std::min<int64_t>(n, 128);
        }
        if (!gen::takes_shape(r)) r.cols = std::min<int64_t>(n - n % 4, 1024);  // the CUDA-native orders' shapes
        if (!gen::takes_shape(r)) continue;  // a dtype the order names but not for this op and host (torch2.15-cpu-*'s f16 attention on Intel)
        out.push_back(r);
      }
  return out;
}

std::string describe(const Request& r) {
  if (forward_of(r.op) == OpKind::attention)
    return fmt::format("{} order={} dtype={} D={} S={}", name(r.op), r.order, name(r.x_dtype), r.cols, r.seq_q);
  return fmt::format("{} order={} dtype={} N={}", name(r.op), r.order, name(r.x_dtype), r.cols);
}

// Scratch buffers (attention) are per-thread arrays by design: they make a stack frame that is
// not a spill.
bool has_scratch(const ir::Kernel& k) {
  for (const ir::Buffer& b : k.buffers)
    if (!ir::is_argument(b)) return true;
  return false;
}

// The source without its names: the entry's name is replaced, and the header comment, which names
// the order, is dropped. Two kernels whose keys are equal compile to the same PTX but for the name.
std::string without_names(std::string text, const std::string& entry) {
  if (text.rfind("// Generated by ordo", 0) == 0) text.erase(0, text.find('\n'));
  for (size_t at = text.find(entry); at != std::string::npos; at = text.find(entry, at))
    text.replace(at, entry.size(), "ENTRY");
  return text;
}

}  // namespace

TEST_CASE("the PTX fma count merges a recomputed fma and not a contracted one") {
  const std::string kept = R"(
	ld.global.f32 	%f1, [%rd1];
	mov.f32 	%f2, 0f3D372713;
	mul.rn.f32 	%f3, %f1, %f1;
	fma.rn.f32 	%f4, %f2, %f3, %f1;
	st.global.f32 	[%rd2], %f4;
)";
  // The same fma recomputed from the same inputs through new registers: one value.
  const std::string recomputed = kept + R"(
	mov.f32 	%f5, 0f3D372713;
	mul.rn.f32 	%f6, %f1, %f1;
	fma.rn.f32 	%f7, %f5, %f6, %f1;
	st.global.f32 	[%rd3], %f7;
)";
  // A mul and an add contracted into an fma of other operands: a second value.
  const std::string contracted = kept + R"(
	fma.rn.f32 	%f8, %f1, %f1, %f2;
	st.global.f32 	[%rd3], %f8;
)";
  // A register written under a predicate is not known to hold the earlier value.
  const std::string predicated = kept + R"(
	@%p1 mul.rn.f32 	%f3, %f1, %f1;
	fma.rn.f32 	%f9, %f2, %f3, %f1;
)";
  CHECK(distinct_values(kept, "fma.rn.f32") == 1);
  CHECK(distinct_values(recomputed, "fma.rn.f32") == 1);
  CHECK(count(recomputed, R"(\bfma\.rn\.f32\b)") == 2);
  CHECK(distinct_values(contracted, "fma.rn.f32") == 2);
  CHECK(distinct_values(predicated, "fma.rn.f32") == 2);
}

TEST_CASE("NVRTC: the PTX holds exactly the IR's fmas, and ptxas spills nothing at sm_90") {
  REQUIRE(cuda_backend::nvrtc_available());
  int kernels = 0, max_registers = 0;
  std::string worst;
  std::vector<std::string> spilling;
  // Each request at a short width (a tail) and a long one (the unrolled chunks, where spills would
  // come). The CI tier compiles each at one of the two, alternating from request to request (NVRTC
  // and ptxas take about a second a kernel); the full tier (ORDO_BACKEND_SWEEP=full) at both.
  std::vector<Request> requests;
  for (int64_t n : {17, 4096}) {
    const std::vector<Request> at_n = shipped(n);
    for (size_t i = 0; i < at_n.size(); ++i)
      if (backend_sweep::full_sweep() || (i % 2 == 0) == (n == 17)) requests.push_back(at_n[i]);
  }
  // Orders that differ only where the CUDA lowering does not look (an alias, a CPU capability, a
  // thread count) render the same source: each distinct source is compiled once, and its PTX is
  // checked against every kernel that rendered it.
  std::map<std::string, cuda_backend::Compiled> compiled_by_source;
  for (const Request& r : requests)
    for (const ir::Kernel& k : gen::build_stages(r, gen::resolve(r))) {  // every stage of a backward op
      const cuda_backend::Source source = cuda_backend::render(k);
      const std::string key = without_names(source.text, source.entry);
      auto found = compiled_by_source.find(key);
      if (found == compiled_by_source.end())
        found = compiled_by_source.emplace(key, cuda_backend::compile(source, 90, false, true)).first;
      const cuda_backend::Compiled& c = found->second;
      INFO(describe(r));
      // CUDA's own expf/logf (device-only orders) bring libdevice's fmas on top of the IR's.
      const bool device_math = !cuda_backend::device_calls(k).empty();
      // Counted by value: NVVM may compute an IR fma a second time from the same inputs rather than
      // keep it in a register (gelu_tanh_backward's x + kKappa x^3), which is the same rounding.
      if (device_math) CHECK(distinct_values(c.ptx, "fma.rn.f32") >= ir_fma_lanes(k.body, ScalarType::f32));
      else CHECK(distinct_values(c.ptx, "fma.rn.f32") == ir_fma_lanes(k.body, ScalarType::f32));
      // f64 fmas are glibc expf's steps (the 16-bit orders' tail exps): exactly the IR's too.
      CHECK(distinct_values(c.ptx, "fma.rn.f64") == ir_fma_lanes(k.body, ScalarType::f64));
      CHECK(count(c.ptx, R"(\bmad\.[a-z.]*f(32|64)\b)") == 0);  // --fmad=false: no contraction
      CHECK(c.ptxas.registers > 0);  // the log was parsed
      const bool spills =
          c.ptxas.spill_stores != 0 || c.ptxas.spill_loads != 0 || (c.ptxas.stack_frame != 0 && !has_scratch(k));
      CHECK(!spills);
      if (spills) spilling.push_back(fmt::format("{} ({})", describe(r), c.ptxas.line));
      if (c.ptxas.registers > max_registers) {
        max_registers = c.ptxas.registers;
        worst = describe(r);
      }
      ++kernels;
    }
  MESSAGE(fmt::format("{} kernels ({} distinct sources) compiled for sm_90: distinct fmas equal the IR's; {} spill: {}; most registers {} ({})",
                      kernels, compiled_by_source.size(), spilling.size(), fmt::join(spilling, "; "), max_registers, worst));
}

// The CUDA-native orders are the block and warp kernels they state: the PTX has their shuffles,
// barriers and (device-only torch-cuda) rsqrt.approx, nothing of them when the IR has none.
TEST_CASE("NVRTC: torch-cuda layer_norm and the warp softmax are block and warp kernels") {
  REQUIRE(cuda_backend::nvrtc_available());
  auto ptx_of = [](OpKind op, const char* order, int64_t n, ScalarType t) {
    Request r;
    r.op = op;
    r.cols = n;
    r.order = order;
    r.x_dtype = t;
    r.target = Target::cuda;
    r.has_weight = r.has_bias = op == OpKind::layer_norm;
    const cuda_backend::Source s = cuda_backend::render(kernel_for(r));
    return std::make_pair(s, cuda_backend::compile(s, 90, false, true));
  };
  for (ScalarType t : {ScalarType::f32, ScalarType::bf16})
    for (const char* order : {"torch-cuda", "torch-cuda-tree"}) {
      const auto [src, c] = ptx_of(OpKind::layer_norm, order, 4096, t);
      INFO(std::string(order), " ", name(t));
      CHECK(src.block_threads == 128);
      CHECK(src.instances_per_block == 1);
      CHECK(count(c.ptx, R"(\bshfl\.sync\.down\.b32\b)") == 15);  // (mean, M2, n) x offsets 16, 8, 4, 2, 1
      CHECK(count(c.ptx, R"(\bbar\.sync\b)") >= 5);                 // cross-warp steps 2 and 1, the statistics
      CHECK(count(c.ptx, R"(\brsqrt\.approx\.f32\b)") == (std::string(order) == "torch-cuda" ? 1 : 0));
      CHECK((src.device_calls.size() == 1) == (std::string(order) == "torch-cuda"));
      if (t == ScalarType::f32) CHECK(count(c.ptx, R"(\bld\.global(\.nc)?\.v4\.f32\b)") == 4);  // x twice, weight, bias
      // N % 4 != 0: PyTorch's two-kernel path, a block of 512 threads and two shuffle trees.
      const auto [src2, c2] = ptx_of(OpKind::layer_norm, order, 4097, t);
      CHECK(src2.block_threads == 512);
      CHECK(count(c2.ptx, R"(\bshfl\.sync\.down\.b32\b)") == 30);  // (mean, M2, n) x 16..1, in every warp, then in warp 0
      CHECK(count(c2.ptx, R"(\bbar\.sync\b)") >= 3);                 // the warps' results, warp 0's load, the statistics
      CHECK(count(c2.ptx, R"(\bdiv\.rn\.f32\b)") >= 3);             // the update's d/n, the merge's nB/n, m2/n
      CHECK(count(c2.ptx, R"(\brsqrt\.approx\.f32\b)") == (std::string(order) == "torch-cuda" ? 1 : 0));
    }
  for (OpKind op : {OpKind::softmax, OpKind::log_softmax})
    for (const char* order : {"torch-cuda", "warp-butterfly"}) {
      const auto [src, c] = ptx_of(op, order, 1000, ScalarType::f32);
      INFO(std::string(order), " ", name(op));
      CHECK(src.block_threads == 32);
      CHECK(count(c.ptx, R"(\bshfl\.sync\.bfly\.b32\b)") == 10);  // max and sum, xor 16, 8, 4, 2, 1
      CHECK((count(c.ptx, R"(\bex2\.approx)") > 0) == (std::string(order) == "torch-cuda"));  // CUDA's expf
    }
}

TEST_CASE("NVRTC: f32 layer_norm and softmax rows are read with 128-bit loads") {
  REQUIRE(cuda_backend::nvrtc_available());
  for (OpKind op : {OpKind::layer_norm, OpKind::softmax, OpKind::log_softmax, OpKind::rms_norm})
    for (const char* order : {"fast", "torch1.13-cpu-avx2", "two-pass-lanes"}) {
      Request r;
      r.op = op;
      r.cols = 4096;
      r.order = order;
      r.has_weight = op == OpKind::layer_norm || op == OpKind::rms_norm;
      r.has_bias = op == OpKind::layer_norm;
      if (!gen::find_order(order) || [&] {
            for (OpKind o : gen::find_order(order)->ops)
              if (o == op) return false;
            return true;
          }())
        continue;
      const cuda_backend::Source s = cuda_backend::render(kernel_for(r));
      const cuda_backend::Compiled c = cuda_backend::compile(s, 90, false, false);
      INFO(describe(r));
      CHECK(count(c.ptx, R"(ld\.global(\.[a-z0-9]+)*\.v4\.)") > 0);
      CHECK(s.buffer_align[0] == 16);  // x: checked at launch
    }
  // A row length that is not a multiple of 4 elements gives no alignment to prove for x (weight
  // and bias would still be, so softmax, which has neither): no vector loads.
  Request r;
  r.op = OpKind::softmax;
  r.cols = 4097;
  r.order = "fast";
  const cuda_backend::Source s = cuda_backend::render(kernel_for(r));
  CHECK(count(cuda_backend::compile(s, 90, false, false).ptx, R"(ld\.global(\.[a-z0-9]+)*\.v[24]\.)") == 0);
  CHECK(s.buffer_align[0] == 4);
}

TEST_CASE("NVRTC: every supported arch compiles to a cubin; others are refused") {
  REQUIRE(cuda_backend::nvrtc_available());
  Request r;
  r.op = OpKind::layer_norm;
  r.cols = 4096;
  r.order = "torch1.13-cpu-avx2";
  const cuda_backend::Source s = cuda_backend::render(kernel_for(r));
  // Every storage type too: the bf16 conversion instruction (cvt.rn.bf16.f32) needs sm_80.
  std::vector<std::pair<std::string, cuda_backend::Source>> sources{{"f32", s}};
  for (ScalarType t : {ScalarType::bf16, ScalarType::f16}) {
    Request typed = r;
    typed.order = "fast";
    typed.x_dtype = t;
    sources.emplace_back(std::string(name(t)), cuda_backend::render(kernel_for(typed)));
  }
  for (int arch : {80, 86, 89, 90})
    for (const auto& [dtype, source] : sources) {
      const cuda_backend::Compiled c = cuda_backend::compile(source, arch, true, false);
      INFO("sm_" << arch << " " << dtype);
      REQUIRE(c.cubin.size() > 4);
      CHECK(c.cubin.substr(0, 4) == "\x7f" "ELF");
      CHECK(c.ptx.find(fmt::format(".target sm_{}", arch)) != std::string::npos);
    }
  CHECK_THROWS_WITH_AS(cuda_backend::compile(s, 75, true, false), doctest::Contains("sm_75"), Error);
  r.target = Target::cuda;
  r.cuda_arch = 70;
  CHECK_THROWS_WITH_AS(compile(r), doctest::Contains("sm_70"), Error);
}

// The 16-bit storage conversions are PTX's cvt instructions on the GPU (templates/ordo_rt.cuh);
// the host's cuda-emu build computes them with ir/float_bits.hpp's algorithms instead, so only
// the PTX can show that the instruction is what NVRTC compiles.
TEST_CASE("NVRTC: f16 and bf16 roundings are PTX cvt instructions") {
  REQUIRE(cuda_backend::nvrtc_available());
  for (ScalarType t : {ScalarType::bf16, ScalarType::f16}) {
    Request r;
    r.op = OpKind::layer_norm;
    r.cols = 4096;
    r.order = "fast";
    r.x_dtype = t;
    r.has_weight = r.has_bias = true;
    const std::string ptx = cuda_backend::compile(cuda_backend::render(kernel_for(r)), 90, false, false).ptx;
    INFO(name(t));
    if (t == ScalarType::bf16) {
      CHECK(count(ptx, R"(cvt\.rn\.bf16\.f32)") > 0);
    } else {
      CHECK(count(ptx, R"(cvt\.rn\.f16\.f32)") > 0);
      CHECK(count(ptx, R"(cvt\.f32\.f16)") > 0);
    }
  }
}

// A PyTorch bf16 kernel rounds its f32 intermediates to bf16 and computes on in f32: the IR's
// Cast pair f32 -> bf16 -> f32, rendered as round_bf16 (templates/ordo_rt.cuh), which is one
// cvt.rn.bf16x2.f32 whose second operand is +0: the rounded value lands in the upper half, the
// f32's bits, and the lower half is 0. No rounding of the pair is left to the two-step form.
TEST_CASE("NVRTC: a bf16 round trip in f32 is one cvt.rn.bf16x2.f32 with a zero lower half") {
  REQUIRE(cuda_backend::nvrtc_available());
  auto cast = [](const ir::Expr& e, ScalarType to, ScalarType from) {
    return e.op == ir::Op::Cast && e.type.scalar == to && e.args[0]->type.scalar == from;
  };
  auto round_trip = [&](const ir::Expr& e) {
    return cast(e, ScalarType::f32, ScalarType::bf16) && cast(*e.args[0], ScalarType::bf16, ScalarType::f32);
  };
  for (const char* order : {"torch1.13-cpu-avx2", "torch-decomp-cpu-avx2"}) {
    Request r;
    r.op = OpKind::layer_norm;
    r.cols = 4096;
    r.order = order;
    r.x_dtype = ScalarType::bf16;
    r.has_weight = r.has_bias = true;
    r.target = Target::cuda;
    const ir::Kernel k = kernel_for(r);
    const int64_t trips = ir_lanes(k.body, round_trip);
    const int64_t roundings = ir_lanes(k.body, [&](const ir::Expr& e) { return cast(e, ScalarType::bf16, ScalarType::f32); });
    const std::string ptx = cuda_backend::compile(cuda_backend::render(k), 90, false, false).ptx;
    const int64_t packed = count(ptx, R"(cvt\.rn\.bf16x2\.f32 %r[0-9]+, %f[0-9]+, 0f00000000;)");
    INFO(std::string(order), ": ", trips, " round trips of ", roundings, " roundings in the IR; ", packed, " packed cvt in the PTX");
    CHECK(trips > 10);
    CHECK(packed > 0);
    CHECK(packed <= trips);  // NVVM may merge identical ones
    CHECK(count(ptx, R"(cvt\.rn\.bf16x2\.f32)") == packed);
    CHECK(count(ptx, R"(cvt\.rn\.bf16\.f32)") <= roundings - trips);  // the two-step form only outside round trips
  }
}

// glibc's expf and logf are IR (gen/blocks/math.cpp), so the CPU reference orders that use them lower to
// CUDA like any other: the source holds their table and no call of CUDA's expf/logf.
TEST_CASE("cuda: the orders using glibc's expf/logf lower with the algorithm written out, not a call") {
  for (OpKind op : {OpKind::softmax, OpKind::log_softmax}) {
    Request r;
    r.op = op;
    r.cols = 100;
    r.order = "torch1.13-cpu-default";
    r.target = Target::cuda;
    const cuda_backend::Source src = cuda_backend::render(kernel_for(r));
    CHECK(src.device_calls.empty());
    CHECK(src.text.find("expf(") == std::string::npos);
    CHECK(src.text.find("logf(") == std::string::npos);
    CHECK(src.text.find("ordo_table0[") != std::string::npos);  // glibc's 2^(i/32) or 1/c table
  }
}

TEST_CASE("cuda: launching needs the driver; without one the error names libcuda.so.1") {
  REQUIRE(cuda_backend::nvrtc_available());
  Request r;
  r.op = OpKind::layer_norm;
  r.cols = 256;
  r.order = "fast";
  r.target = Target::cuda;
  KernelHandle k = compile(r);  // generating and compiling need no driver
  REQUIRE(k->cuda_compiled() != nullptr);
  CHECK(!k->cuda_compiled()->cubin.empty());
  const int64_t rows = 3;
  HostBuffers h = make_buffers(*k, rows, 3, 0.0, 1.0);
  const std::string status = cuda_backend::driver_status();
  if (!status.empty()) {
    CHECK_THROWS_WITH_AS(k->run(h.refs(rows, r.cols), rows), doctest::Contains(status.c_str()), Error);
    // Here, the usual case without a GPU: no driver library at all.
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) CHECK(status.find("dlopen(\"libcuda.so.1\") failed") != std::string::npos);
    else dlclose(lib);
    MESSAGE("launch refused: " << status);
    return;
  }
  // A machine with a GPU: the launch must equal the interpreter.
  k->run(h.refs(rows, r.cols), rows);
  r.target = Target::interpreter;
  KernelHandle ki = compile(r);
  HostBuffers want = make_buffers(*ki, rows, 3, 0.0, 1.0);
  ki->run(want.refs(rows, r.cols), rows);
  for (size_t i = 0; i < h.args.size(); ++i)
    if (h.args[i].output) CHECK(count_identical(h.args[i].dtype, h.bytes[i], want.bytes[i]) == h.args[i].elements(rows, r.cols));
}
