// Fuzz target: the IR verifier and interpreter on randomly built kernels (ir/verify.cpp,
// ir/interpret.cpp), and the LLVM lowering of the kernels that verify (backends/llvm/lower.cpp).
//
// The input drives a generator. Most nodes are built with the Builder and the expression
// constructors of ir/ir.hpp and are well typed, so that many kernels verify and run; some are
// built ill-typed on purpose (operand types, lanes, casts, non-uniform loop bounds, stores into
// inputs, ...), and a few are malformed as plain structs (null operands, operand counts and
// indices that the constructors would never produce), which the verifier exists to reject.
//
// Promises checked:
//  * ir::verify returns "" or a message; it never crashes or throws.
//  * A kernel that verifies prints, and runs on the interpreter over small, correctly sized
//    buffers either to the end or to an ordo::Error (an out-of-bounds access, a read of an
//    unassigned local, an integer division by zero); never a crash, a sanitizer report or
//    another exception.
//  * A kernel that verifies lowers to a function LLVM's verifier accepts, for 1 to 4 rows in
//    flight.
//  * A kernel that runs on the interpreter to the end also runs JIT-compiled (one row in flight,
//    one thread) on the same inputs, and leaves every buffer bit-identical to the interpreter's,
//    NaN equal to NaN (ir.hpp). The interpreter finishing is what makes running it safe: every
//    access was in bounds, every local read was assigned, every division was defined. One row in
//    flight runs the instances one after another in the interpreter's order, so even kernels
//    whose instances write the same element (which the IR leaves unordered) must agree. JIT code
//    stays loaded for the life of the process, and a JIT compile costs far more than the rest of an
//    input, so one input in sixteen (by its first byte) runs, at most kMaxJitRuns per process.
#include <fuzzer/FuzzedDataProvider.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <climits>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backends/llvm/llvm_backend.hpp"
#include "backends/llvm/lower.hpp"
#include "fuzz_common.hpp"
#include "ir/float_bits.hpp"

namespace {

using namespace ordo;
using namespace ordo::ir;

constexpr ScalarType kScalars[] = {ScalarType::f32, ScalarType::f64, ScalarType::i64, ScalarType::i32,
                                   ScalarType::boolean, ScalarType::f16, ScalarType::bf16};
constexpr int kMaxStatements = 40;
constexpr int kMaxExprDepth = 6;
constexpr int kMaxLoopDepth = 3;
constexpr int kMaxJitRuns = 3000;

class KernelGen {
 public:
  explicit KernelGen(FuzzedDataProvider& in) : in_(in), b_(kernel) {}

  // The kernel, and the launch it runs with: grid extents and N (the length of `cols` buffers).
  Kernel kernel;
  std::vector<int64_t> extents;
  int64_t cols = 0;

  void generate() {
    kernel.name = "fuzz";
    kernel.grid_rank = in_.ConsumeIntegralInRange(0, 63) == 0 ? in_.ConsumeIntegralInRange(-1, 4) : in_.ConsumeIntegralInRange(1, 3);
    for (int d = 0; d < std::max(0, std::min(kernel.grid_rank, 3)); ++d) extents.push_back(in_.ConsumeIntegralInRange<int64_t>(0, 3));
    cols = in_.ConsumeIntegralInRange<int64_t>(0, 12);
    const int buffers = in_.ConsumeIntegralInRange(0, 4);
    for (int i = 0; i < buffers; ++i) {
      const ScalarType t = scalar();
      const Extent e = static_cast<Extent>(in_.ConsumeIntegralInRange(0, 2));
      b_.buffer(fmt::format("b{}", i), t, in_.ConsumeBool(), e);
    }
    const int tables = in_.ConsumeIntegralInRange(0, 2);
    for (int i = 0; i < tables; ++i) {
      std::vector<int64_t> values(in_.ConsumeIntegralInRange<size_t>(0, 8));
      for (int64_t& v : values) v = small_or_edge();
      b_.table(values);
    }
    if (one_in(4)) {  // a team kernel: the random statements run per thread, then the team's own nodes
      kernel.team = in_.ConsumeBool() ? 32 : 64;
      b_.team([&](ExprRef) {
        bodies_.push_back(&kernel.body.back().body);
        statements(0);
        bodies_.pop_back();
      });
      team_block();
      return;
    }
    statements(0);
    if (one_in(4)) lanes_block();
  }

  // Teams' nodes in well-typed form (kernel.team threads): thread_id, shuffles down and xor of a
  // per-thread value, and team memory written by each thread and read by another in the next
  // team statement; every thread's value ends in a rows*team output.
  void team_block() {
    const int T = kernel.team;
    const int out = b_.buffer("team_out", ScalarType::f32, true, Extent::rows_by_fixed, T);
    const int shared = b_.buffer("team_memory", ScalarType::f32, true, Extent::scratch, T);
    const int v = b_.local("v", Type{ScalarType::f32, 1});
    const double scale = float_value();
    b_.team([&](ExprRef t) { b_.assign(v, mul(cast(t, ScalarType::f32), constant(Type{ScalarType::f32, 1}, static_cast<float>(scale)))); });
    const int steps = in_.ConsumeIntegralInRange(0, 3);
    for (int i = 0; i < steps; ++i) {
      const int offset = in_.ConsumeIntegralInRange(1, 31);
      const bool xor_ = in_.ConsumeBool();
      b_.team([&](ExprRef) {
        ExprRef other = b_.let("other", xor_ ? shuffle_xor(kernel, v, offset) : shuffle_down(kernel, v, offset));
        b_.assign(v, in_.ConsumeBool() ? add(b_.get(v), other) : binary(Op::Max, b_.get(v), other));
      });
    }
    const int64_t shift = in_.ConsumeIntegralInRange<int64_t>(0, T - 1);
    b_.team([&](ExprRef t) { b_.store(shared, t, b_.get(v)); });
    b_.team([&](ExprRef t) {
      b_.assign(v, load(kernel, shared, binary(Op::Rem, add(t, index_const(shift)), index_const(T))));
      b_.store(out, add(mul(program_id(0), index_const(T)), t), b_.get(v));
    });
  }

  // Attention's nodes in well-typed form, on buffers of their own appended to the kernel: an
  // input and an output of rows*K elements and a scratch buffer (the last buffer, as the
  // verifier requires). Lane l of a vector index is (program_id(0)*K + iota*stride + offset),
  // clamped to the row, so gathers and scatters stay in bounds; the scatter may write one
  // element from several lanes (the higher lane's value stays).
  void lanes_block() {
    const int L = std::vector<int>{1, 2, 4, 8, 16}[in_.ConsumeIntegralInRange<size_t>(0, 4)];
    const int64_t K = in_.ConsumeIntegralInRange<int64_t>(1, 40);
    const ScalarType t = std::vector<ScalarType>{ScalarType::f32, ScalarType::bf16, ScalarType::f64}[in_.ConsumeIntegralInRange<size_t>(0, 2)];
    const int src = b_.buffer("fixed_in", t, false, Extent::rows_by_fixed, K);
    const int dst = b_.buffer("fixed_out", t, true, Extent::rows_by_fixed, K);
    const int scratch = b_.buffer("scratch", t, true, Extent::scratch, K);
    auto lane_index = [&]() {
      ExprRef stride = broadcast(index_const(in_.ConsumeIntegralInRange<int64_t>(0, 5)), L);
      ExprRef offset = broadcast(index_const(in_.ConsumeIntegralInRange<int64_t>(0, K - 1)), L);
      ExprRef within = binary(Op::Min, add(mul(iota(L), stride), offset), broadcast(index_const(K - 1), L));
      return b_.let("lanes", within);
    };
    ExprRef base = b_.let("fixed_row", mul(program_id(0), index_const(K)));
    // Scratch is written before it is read: fill it from the input, element by element.
    b_.for_range("i", index_const(0), index_const(K), 1, [&](ExprRef i) { b_.store(scratch, i, load(kernel, src, add(base, i))); });
    ExprRef idx = lane_index();
    ExprRef g = b_.let("gathered", gather(kernel, scratch, idx));
    b_.store(scratch, lane_index(), g);  // a scatter inside scratch
    ExprRef from_input = gather(kernel, src, add(broadcast(base, L), lane_index()));
    b_.store(dst, add(broadcast(base, L), lane_index()), in_.ConsumeBool() ? from_input : gather(kernel, scratch, lane_index()));
  }

 private:
  FuzzedDataProvider& in_;
  Builder b_;
  std::vector<int> loop_vars_;  // variables of the loops around the current statement
  // The statement list the Builder appends to, innermost last (the Builder keeps its own copy
  // private); raw statements go there too.
  std::vector<std::vector<Stmt>*> bodies_{&kernel.body};
  int statements_ = 0;

  // Rare choices. Once the input is used up FuzzedDataProvider returns each range's minimum, so
  // this must then say no, or the generator would never stop.
  bool one_in(int n) { return in_.remaining_bytes() > 0 && in_.ConsumeIntegralInRange(1, n) == 1; }
  ScalarType scalar() { return kScalars[in_.ConsumeIntegralInRange<size_t>(0, 6)]; }
  int lanes() {
    static constexpr int kLanes[] = {1, 1, 1, 1, 2, 4, 8, 16, 32};
    if (one_in(64)) return in_.ConsumeIntegralInRange(-1, 40);  // out of [1, 32] at times
    return kLanes[in_.ConsumeIntegralInRange<size_t>(0, 8)];
  }
  // Mostly small; sometimes the edges of i64.
  int64_t small_or_edge() {
    if (one_in(16)) {
      static constexpr int64_t kEdges[] = {INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1, int64_t(1) << 62, -1, INT32_MAX, INT32_MIN};
      return kEdges[in_.ConsumeIntegralInRange<size_t>(0, 7)];
    }
    return in_.ConsumeIntegralInRange<int64_t>(-4, 40);
  }
  double float_value() {
    static constexpr double kValues[] = {0.0, -0.0, 1.0, -1.5, 0.1, 1e30, -1e-30, 65504.0, 3.5e38, 1e300, 2.0, 0.5};
    if (one_in(8)) return in_.ConsumeFloatingPoint<double>();  // any double, incl. inexact f32 ones
    if (one_in(16)) return std::numeric_limits<double>::quiet_NaN();
    if (one_in(16)) return std::numeric_limits<double>::infinity();
    return kValues[in_.ConsumeIntegralInRange<size_t>(0, 11)];
  }

  // Locals assigned so far (in program text) with type t, loop variables excluded.
  std::vector<int> locals_of(Type t) const {
    std::vector<int> out;
    for (size_t i = 0; i < kernel.locals.size(); ++i)
      if (kernel.locals[i].type == t && std::find(loop_vars_.begin(), loop_vars_.end(), static_cast<int>(i)) == loop_vars_.end())
        out.push_back(static_cast<int>(i));
    return out;
  }
  std::vector<int> buffers_of(ScalarType t) const {
    std::vector<int> out;
    for (size_t i = 0; i < kernel.buffers.size(); ++i)
      if (kernel.buffers[i].elem == t) out.push_back(static_cast<int>(i));
    return out;
  }
  template <class T>
  T pick(const std::vector<T>& v) { return v[in_.ConsumeIntegralInRange<size_t>(0, v.size() - 1)]; }

  ExprRef const_of(Type t) {
    auto e = std::make_shared<Expr>();
    e->op = Op::Const;
    e->type = t;
    if (is_float(t.scalar)) e->imm_f = float_value();
    else if (t.scalar == ScalarType::boolean) e->imm_i = in_.ConsumeBool();
    else if (t.scalar == ScalarType::i32) e->imm_i = one_in(32) ? small_or_edge() : in_.ConsumeIntegral<int32_t>();
    else e->imm_i = small_or_edge();
    if (t.scalar == ScalarType::f32 && !one_in(16)) e->imm_f = static_cast<float>(e->imm_f);  // usually exact in f32
    return e;
  }

  // An i64 index: small, built from constants, loop variables and program ids.
  ExprRef index(int depth) {
    if (depth >= kMaxExprDepth) return index_const(in_.ConsumeIntegralInRange<int64_t>(-2, 30));
    switch (in_.ConsumeIntegralInRange(0, 5)) {
      case 0: return index_const(in_.ConsumeIntegralInRange<int64_t>(-2, 30));
      case 1:
        if (!loop_vars_.empty()) return b_.get(pick(loop_vars_));
        return index_const(0);
      case 2: return program_id(in_.ConsumeIntegralInRange(0, 2));
      case 3: return add(mul(program_id(0), index_const(std::max<int64_t>(cols, 1))), index(depth + 1));
      default: return expr(Type{ScalarType::i64, 1}, depth + 1);
    }
  }

  // A loop bound: uniform and small, so every loop ends soon. `begin` may also sit at the top
  // of the i64 range, where the loop's own arithmetic is tested.
  ExprRef bound(bool begin) {
    switch (in_.ConsumeIntegralInRange(0, 5)) {
      case 0:
        if (!loop_vars_.empty()) return b_.get(pick(loop_vars_));
        return index_const(1);
      case 1: return grid_extent(0);
      case 2:
        if (!loop_vars_.empty()) return add(b_.get(pick(loop_vars_)), index_const(in_.ConsumeIntegralInRange<int64_t>(-2, 6)));
        return index_const(2);
      case 3:
        if (begin && one_in(4)) return index_const(INT64_MAX - in_.ConsumeIntegralInRange<int64_t>(0, 3));
        return index_const(in_.ConsumeIntegralInRange<int64_t>(-2, 12));
      case 4:  // non-uniform: the verifier must refuse these (if it did not, the bound stays small)
        if (one_in(8)) {
          ExprRef pid = add(program_id(0), index_const(in_.ConsumeIntegralInRange<int64_t>(0, 4)));
          std::vector<int> bs = buffers_of(ScalarType::i64);
          return bs.empty() || in_.ConsumeBool() ? pid : binary(Op::Min, load(kernel, pick(bs), index_const(0)), index_const(8));
        }
        return index_const(in_.ConsumeIntegralInRange<int64_t>(0, 8));
      default: return index_const(in_.ConsumeIntegralInRange<int64_t>(0, 10));
    }
  }

  // A node with random operands and type, mostly ill-typed.
  ExprRef wild(int depth) {
    auto e = std::make_shared<Expr>();
    e->op = static_cast<Op>(in_.ConsumeIntegralInRange(0, static_cast<int>(Op::Table)));
    e->type = Type{scalar(), lanes()};
    for (int i = 0; i < arity(e->op); ++i) e->args.push_back(expr(Type{scalar(), lanes()}, depth + 1));
    e->index = in_.ConsumeIntegralInRange<int64_t>(-1, 4);
    if (is_float(e->type.scalar)) e->imm_f = float_value();
    else e->imm_i = small_or_edge();
    return e;
  }

  // A node no constructor would build: a null operand, a wrong operand count, an index far out
  // of range. The verifier's job is to say so.
  ExprRef malformed(int depth) {
    ExprRef base = wild(depth);
    auto e = std::make_shared<Expr>(*base);
    switch (in_.ConsumeIntegralInRange(0, 3)) {
      case 0:
        if (!e->args.empty()) e->args[in_.ConsumeIntegralInRange<size_t>(0, e->args.size() - 1)] = nullptr;
        break;
      case 1:
        if (!e->args.empty() && in_.ConsumeBool()) e->args.pop_back();
        else e->args.push_back(expr(e->type, depth + 1));
        break;
      case 2: e->index = in_.ConsumeBool() ? int64_t(1) << 40 : -int64_t(1) << 40; break;
      default: e->type.lanes = in_.ConsumeBool() ? 0 : 1 << 20; break;
    }
    return e;
  }

  ExprRef expr(Type t, int depth) {
    if (depth >= kMaxExprDepth + 2) return const_of(t);  // the hard cap: wild nodes and loads nest too
    if (one_in(48)) return one_in(8) ? malformed(depth) : wild(depth);
    if (depth >= kMaxExprDepth || in_.remaining_bytes() == 0) return leaf(t, depth);
    const ScalarType s = t.scalar;
    const Type scalar_t{s, 1};
    switch (in_.ConsumeIntegralInRange(0, 9)) {
      case 0: return leaf(t, depth);
      case 1:  // select
        return select(expr(Type{ScalarType::boolean, t.lanes}, depth + 1), expr(t, depth + 1), expr(t, depth + 1));
      case 2:  // broadcast a scalar (now and then to one lane), or extract one lane
        if (t.lanes > 1 || one_in(16)) return broadcast(expr(scalar_t, depth + 1), t.lanes);
        {
          const int from = lanes();
          return extract(expr(Type{s, from}, depth + 1), in_.ConsumeIntegralInRange(0, std::max(0, from - 1)));
        }
      default: break;
    }
    if (is_arith_float(s)) {
      switch (in_.ConsumeIntegralInRange(0, 10)) {
        case 0: return binary(Op::Add, expr(t, depth + 1), expr(t, depth + 1));
        case 1: return binary(pick(std::vector<Op>{Op::Sub, Op::Mul, Op::Div}), expr(t, depth + 1), expr(t, depth + 1));
        case 2: return binary(in_.ConsumeBool() ? Op::Min : Op::Max, expr(t, depth + 1), expr(t, depth + 1));
        case 3: return fma(expr(t, depth + 1), expr(t, depth + 1), expr(t, depth + 1));
        case 4: return unary(pick(std::vector<Op>{Op::Sqrt, Op::Neg, Op::Floor}), expr(t, depth + 1));
        case 5: {  // casts into a float type
          static constexpr ScalarType kFrom[] = {ScalarType::f32, ScalarType::f64, ScalarType::f16, ScalarType::bf16,
                                                 ScalarType::i64, ScalarType::i32};
          return cast(expr(Type{kFrom[in_.ConsumeIntegralInRange<size_t>(0, 5)], t.lanes}, depth + 1), s);
        }
        case 6:
          if (s == ScalarType::f64) return bitcast(expr(Type{ScalarType::i64, t.lanes}, depth + 1), ScalarType::f64);
          return leaf(t, depth);
        case 7:
          if (s == ScalarType::f32) return bitcast(expr(Type{ScalarType::i32, t.lanes}, depth + 1), ScalarType::f32);
          return leaf(t, depth);
        case 8:
          if (s == ScalarType::f32) return ldexp_in_domain(t, depth);
          return leaf(t, depth);
        case 9:  // vdpbf16ps's flushes and its factors' ignored low halves
          if (s == ScalarType::f32)
            return bf16_pair_dot(expr(t, depth + 1), expr(t, depth + 1), expr(t, depth + 1), expr(t, depth + 1), expr(t, depth + 1));
          return leaf(t, depth);
        default: return leaf(t, depth);
      }
    }
    switch (s) {
      case ScalarType::f16:
      case ScalarType::bf16:
        return cast(expr(Type{ScalarType::f32, t.lanes}, depth + 1), s);
      case ScalarType::i64:
        switch (in_.ConsumeIntegralInRange(0, 9)) {
          case 0: return binary(pick(std::vector<Op>{Op::Add, Op::Sub, Op::Mul}), expr(t, depth + 1), expr(t, depth + 1));
          case 6: return binary(Op::BitAnd, expr(t, depth + 1), expr(t, depth + 1));
          case 7: return shift(t, depth);
          case 8: return in_.ConsumeBool() ? bitcast(expr(Type{ScalarType::f64, t.lanes}, depth + 1), ScalarType::i64)
                                           : cast(expr(Type{ScalarType::i32, t.lanes}, depth + 1), ScalarType::i64);
          case 1: return binary(pick(std::vector<Op>{Op::Div, Op::Rem, Op::Min, Op::Max}), expr(t, depth + 1), expr(t, depth + 1));
          case 2: return grid_extent(in_.ConsumeIntegralInRange(0, 2));
          case 3: return program_id(in_.ConsumeIntegralInRange(0, 2));
          case 4:
            if (!kernel.tables.empty()) return table(in_.ConsumeIntegralInRange(0, static_cast<int>(kernel.tables.size()) - 1), index(depth + 1));
            return leaf(t, depth);
          case 5: return index(depth + 1);
          default: return leaf(t, depth);
        }
      case ScalarType::i32:
        switch (in_.ConsumeIntegralInRange(0, 5)) {
          case 0: return binary(pick(std::vector<Op>{Op::Add, Op::Sub, Op::Mul, Op::BitAnd}), expr(t, depth + 1), expr(t, depth + 1));
          case 1: return shift(t, depth);
          case 2: return bitcast(expr(Type{ScalarType::f32, t.lanes}, depth + 1), ScalarType::i32);
          case 3: return cast(expr(Type{ScalarType::f32, t.lanes}, depth + 1), ScalarType::i32);
          default: return leaf(t, depth);
        }
      case ScalarType::boolean:
        switch (in_.ConsumeIntegralInRange(0, 3)) {
          case 0: {
            static constexpr ScalarType kCompared[] = {ScalarType::f32, ScalarType::f64, ScalarType::i64};
            const Type c{kCompared[in_.ConsumeIntegralInRange<size_t>(0, 2)], t.lanes};
            return binary(pick(std::vector<Op>{Op::Lt, Op::Le, Op::Eq, Op::Ne}), expr(c, depth + 1), expr(c, depth + 1));
          }
          case 1: return binary(in_.ConsumeBool() ? Op::And : Op::Or, expr(t, depth + 1), expr(t, depth + 1));
          default: return leaf(t, depth);
        }
      default: return leaf(t, depth);
    }
  }

  // ldexp is defined only inside its domain (ir.hpp): |x| in [0.5, 2) (or NaN), n in [-250, 254].
  // Any f32 expression's mantissa bits with the exponent of 1, now and then negated, and any i32
  // expression's low 8 bits counted from either end of the domain, so subnormal results, ties and
  // the largest results all occur.
  ExprRef ldexp_in_domain(Type t, int depth) {
    auto splat = [&](int64_t v) {
      ExprRef c = constant(Type{ScalarType::i32, 1}, static_cast<double>(v));
      return t.lanes > 1 ? broadcast(c, t.lanes) : c;
    };
    const Type i32{ScalarType::i32, t.lanes};
    ExprRef mantissa = binary(Op::BitAnd, bitcast(expr(t, depth + 1), ScalarType::i32), splat(0x007fffff));
    ExprRef x = bitcast(add(mantissa, splat(0x3f800000)), ScalarType::f32);  // in [1, 2)
    if (in_.ConsumeBool()) x = unary(Op::Neg, x);
    ExprRef low = binary(Op::BitAnd, expr(i32, depth + 1), splat(255));
    ExprRef n = in_.ConsumeBool() ? sub(low, splat(250)) : sub(splat(254), low);
    return binary(Op::Ldexp, x, n);
  }

  // Shifts take a constant count, splatted for vectors; now and then one out of range.
  ExprRef shift(Type t, int depth) {
    const int bits = t.scalar == ScalarType::i32 ? 32 : 64;
    auto c = std::make_shared<Expr>();
    c->op = Op::Const;
    c->type = Type{t.scalar, 1};
    c->imm_i = one_in(16) ? in_.ConsumeIntegralInRange(-1, bits + 8) : in_.ConsumeIntegralInRange(0, bits - 1);
    ExprRef count = t.lanes > 1 ? broadcast(c, t.lanes) : ExprRef(c);
    return binary(in_.ConsumeBool() ? Op::Shl : Op::Shr, expr(t, depth + 1), count);
  }

  // A constant, a local, a loop variable or a load of type t.
  ExprRef leaf(Type t, int depth) {
    switch (in_.ConsumeIntegralInRange(0, 3)) {
      case 0: {
        std::vector<int> ls = locals_of(t);
        if (!ls.empty()) return b_.get(pick(ls));
        break;
      }
      case 1:
        if (t == Type{ScalarType::i64, 1} && !loop_vars_.empty()) return b_.get(pick(loop_vars_));
        break;
      case 2: {
        std::vector<int> bs = buffers_of(t.scalar);
        if (!bs.empty() && t.lanes >= 1) return load(kernel, pick(bs), index(depth + 1), t.lanes);
        break;
      }
      default: break;
    }
    return const_of(t);
  }

  void statements(int loop_depth) {
    const int count = in_.ConsumeIntegralInRange(0, 6);
    for (int i = 0; i < count && statements_ < kMaxStatements && in_.remaining_bytes() > 0; ++i) statement(loop_depth);
  }

  void nested(std::vector<Stmt>* body, int loop_depth) {
    bodies_.push_back(body);
    statements(loop_depth);
    bodies_.pop_back();
  }

  void statement(int loop_depth) {
    ++statements_;
    switch (in_.ConsumeIntegralInRange(0, 7)) {
      case 0:
      case 1: {  // assign a new or an existing local
        Type t{scalar(), lanes()};
        std::vector<int> same = locals_of(t);
        const int target = !same.empty() && in_.ConsumeBool() ? pick(same) : b_.local("v", t);
        if (!loop_vars_.empty() && one_in(32)) return b_.assign(pick(loop_vars_), expr(Type{ScalarType::i64, 1}, 0));
        b_.assign(target, expr(t, 0));
        return;
      }
      case 2:
      case 3: {  // store into a buffer, usually an output
        if (kernel.buffers.empty()) return;
        const int buf = static_cast<int>(in_.ConsumeIntegralInRange<size_t>(0, kernel.buffers.size() - 1));
        const Type t{kernel.buffers[static_cast<size_t>(buf)].elem, lanes()};
        b_.store(buf, index(0), expr(t, 0));
        return;
      }
      case 4: {
        if (loop_depth >= kMaxLoopDepth) return;
        ExprRef begin = bound(true), end = bound(false);
        const int64_t step = one_in(32) ? in_.ConsumeIntegralInRange<int64_t>(-1, 0) : in_.ConsumeIntegralInRange<int64_t>(1, 4);
        std::vector<Stmt>* parent = bodies_.back();
        b_.for_range("i", begin, end, step, [&](ExprRef v) {
          loop_vars_.push_back(static_cast<int>(v->index));
          nested(&parent->back().body, loop_depth + 1);
          loop_vars_.pop_back();
        });
        return;
      }
      case 5: {  // if: a uniform condition on loop variables and constants, or any bool; or a
                 // per-instance if on any bool (data included)
        ExprRef cond = one_in(4) ? expr(Type{ScalarType::boolean, 1}, 0)
                                 : binary(pick(std::vector<Op>{Op::Lt, Op::Le, Op::Eq, Op::Ne}), bound(false), bound(false));
        std::vector<Stmt>* parent = bodies_.back();
        if (one_in(8))
          b_.if_else_per_instance(expr(Type{ScalarType::boolean, 1}, 0), [&] { nested(&parent->back().body, loop_depth); },
                                  [&] { nested(&parent->back().else_body, loop_depth); });
        else if (in_.ConsumeBool()) b_.if_(cond, [&] { nested(&parent->back().body, loop_depth); });
        else
          b_.if_else(cond, [&] { nested(&parent->back().body, loop_depth); }, [&] { nested(&parent->back().else_body, loop_depth); });
        return;
      }
      case 6: {
        std::vector<Stmt>* parent = bodies_.back();
        b_.region("r", "fuzz", [&] { nested(&parent->back().body, loop_depth); });
        return;
      }
      default:  // a statement with a field the Builder never leaves empty or out of range
        if (one_in(4)) {
          Stmt s{static_cast<StmtKind>(in_.ConsumeIntegralInRange(0, 4))};
          s.target = in_.ConsumeIntegralInRange(-1, 2) * (one_in(2) ? 1 : 1000);
          if (in_.ConsumeBool()) s.value = expr(Type{scalar(), lanes()}, 0);
          if (in_.ConsumeBool()) s.index = index(0);
          if (in_.ConsumeBool()) s.begin = bound(true);
          if (in_.ConsumeBool()) s.end = bound(false);
          s.step = in_.ConsumeIntegralInRange<int64_t>(-1, 3);
          bodies_.back()->push_back(std::move(s));
        }
        return;
    }
  }
};

// Element counts of the launch's buffers, by extent.
int64_t elements(const Buffer& b, int64_t rows, int64_t cols) {
  const Extent e = b.extent;
  return e == Extent::rows_by_cols ? rows * cols : e == Extent::cols ? cols : e == Extent::rows_by_fixed ? rows * b.per_row : rows;
}

// Element i of a buffer of t as bits, every NaN mapped to one value (ir.hpp: NaN payloads are
// not specified).
uint64_t canonical_bits(ScalarType t, const void* data, int64_t i) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t bits = 0;
  std::memcpy(&bits, p + i * size_bytes(t), static_cast<size_t>(size_bytes(t)));
  switch (t) {
    case ScalarType::f64: return std::isnan(std::bit_cast<double>(bits)) ? 1 : bits << 1;
    case ScalarType::f32: return std::isnan(std::bit_cast<float>(static_cast<uint32_t>(bits))) ? 1 : bits << 1;
    case ScalarType::f16: return std::isnan(f16_bits_to_f32(static_cast<uint16_t>(bits))) ? 1 : bits << 1;
    case ScalarType::bf16: return std::isnan(bf16_bits_to_f32(static_cast<uint16_t>(bits))) ? 1 : bits << 1;
    default: return bits;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  // One byte: rows in flight for the lowering (1 + its low two bits, as ConsumeIntegralInRange(1, 4)
  // read it), and whether this kernel also runs JIT-compiled (one in sixteen: a JIT compile costs
  // far more than the rest of an input).
  const uint8_t head = in.ConsumeIntegral<uint8_t>();
  const int rows_in_flight = 1 + head % 4;
  const bool run_jit = (head >> 2) % 16 == 0;
  KernelGen g(in);
  g.generate();
  const Kernel& k = g.kernel;

  std::string err;
  try {
    err = verify(k);
  } catch (const std::exception& e) {
    fuzz::broken(fmt::format("ir::verify threw instead of returning a message: {}", e.what()));
  }
  if (!err.empty()) return 0;
  (void)print(k);

  int64_t rows = 1;
  for (int64_t e : g.extents) rows *= e;
  std::vector<std::vector<uint64_t>> storage;  // 8-byte aligned, like any allocation the runtime makes
  std::vector<BufferArg> args;
  const std::vector<uint8_t> fill = in.ConsumeRemainingBytes<uint8_t>();
  for (const Buffer& b : k.buffers) {
    if (!is_argument(b)) continue;  // scratch: the kernel's own
    const int64_t n = elements(b, rows, g.cols);
    const size_t bytes = static_cast<size_t>(n * size_bytes(b.elem));
    storage.emplace_back((bytes + 7) / 8, 0x3ff0000000000000ull);
    if (bytes > 0 && !fill.empty()) std::memcpy(storage.back().data(), fill.data(), std::min(bytes, fill.size()));
    args.push_back(BufferArg{storage.back().data(), n});
  }
  const std::vector<std::vector<uint64_t>> initial = storage;
  bool interpreted = true;
  try {
    interpret(k, args, g.extents);
  } catch (const Error&) {
    interpreted = false;  // a documented run-time error of the interpreter
  }

  static int jit_runs = 0;
  if (run_jit && interpreted && rows > 0 && jit_runs < kMaxJitRuns) {
    ++jit_runs;
    std::vector<std::vector<uint64_t>> jit_storage = initial;
    std::vector<void*> ptrs;
    for (std::vector<uint64_t>& s : jit_storage) ptrs.push_back(s.data());
    llvm_backend::Options options;
    options.rows_in_flight = 1;
    llvm_backend::Compiled compiled;  // holds the machine code while it runs below
    try {
      compiled = llvm_backend::compile(k, options);
    } catch (const std::exception& e) {
      fuzz::broken(fmt::format("a kernel that verifies does not JIT-compile: {}\n{}", e.what(), print(k)));
    }
    compiled.entry(ptrs.data(), g.extents.data(), 0, rows, 0);
    for (size_t b = 0; b < args.size(); ++b)
      for (int64_t i = 0; i < args[b].elements; ++i)
        if (canonical_bits(k.buffers[b].elem, storage[b].data(), i) != canonical_bits(k.buffers[b].elem, jit_storage[b].data(), i))
          fuzz::broken(fmt::format("JIT-compiled code and the interpreter disagree on {}[{}]\n{}", k.buffers[b].name, i, print(k)));
  }

  llvm::LLVMContext ctx;
  llvm::Module mod("fuzz", ctx);
  try {
    // A team, and a kernel whose instances may take different paths, runs one instance at a time.
    llvm_backend::lower(mod, k, "fuzz_kernel", k.team > 1 || ir::has_per_instance_control(k) ? 1 : rows_in_flight);
  } catch (const std::exception& e) {
    fuzz::broken(fmt::format("a kernel that verifies does not lower: {}\n{}", e.what(), print(k)));
  }
  return 0;
}
