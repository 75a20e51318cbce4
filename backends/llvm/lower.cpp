// IR -> LLVM IR.
#include <fmt/format.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Host.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <functional>
#include <optional>
#include <unordered_map>

#include "backends/llvm/llvm_backend.hpp"
#include "backends/llvm/lower.hpp"
#include "ir/error.hpp"

namespace ordo::llvm_backend {

using namespace ordo::ir;

namespace {

// The host's vector conversions that ordo's lowering uses when present (its kernels run on the
// host, or, for ordo build, on a CPU like it: the disk cache and objects are keyed by its features).
struct HostConversions {
  bool avx512f = false, avx512vl = false, avx = false, sse2 = false;
  bool avx512bf16 = false;  // vdpbf16ps: Op::Bf16PairDot in one instruction
};
const HostConversions& host_conversions() {
  static const HostConversions h = [] {
    HostConversions c;
    const llvm::StringMap<bool> f = llvm::sys::getHostCPUFeatures();
    auto has = [&](const char* name) { auto it = f.find(name); return it != f.end() && it->second; };
    c.avx512f = has("avx512f");
    c.avx512vl = has("avx512vl");
    c.avx = has("avx");
    c.sse2 = has("sse2");
    c.avx512bf16 = has("avx512bf16") && c.avx512vl;
    return c;
  }();
  return h;
}

struct Lowerer {
  llvm::LLVMContext& ctx;
  const Kernel& k;
  llvm::IRBuilder<> B;
  llvm::Function* fn = nullptr;
  int R = 1;                                      // instances in lock step
  std::vector<std::vector<llvm::Value*>> buffers;  // base pointers [buffer][instance]
  std::vector<llvm::GlobalVariable*> tables;      // Kernel::tables as private constants
  llvm::Value* stream_outputs = nullptr;          // i1: launch flag kStreamOutputs
  llvm::Value* extents_arg = nullptr;             // i64* grid extents
  std::vector<std::vector<llvm::Value*>> pid;     // [instance][dim]
  std::vector<std::vector<llvm::AllocaInst*>> locals;  // [local][instance]
  // Team kernels (R = 1): a per-thread local is an array of `team` values indexed by the running
  // thread; a Team statement is a loop over `thread`. Shuffles read a copy of the local's array
  // taken when the Team statement begins (the IR's meaning), in `snapshots`.
  std::vector<char> per_thread;
  llvm::Value* thread = nullptr;
  std::unordered_map<int64_t, llvm::AllocaInst*> snapshots;  // made at the first Team statement that needs one
  llvm::BasicBlock* entry_block = nullptr;
  std::unordered_map<const Expr*, std::vector<llvm::Value*>> memo;  // within one statement

  // Bounds on |value| of i64 locals (nullopt: unknown), for loop ends: see magnitude().
  std::vector<std::optional<uint64_t>> local_bound;

  Lowerer(llvm::LLVMContext& c, const Kernel& kernel) : ctx(c), k(kernel), B(c) {}

  // An upper bound on |e| for an i64 expression built from constants, tables, locals and
  // arithmetic, or nullopt. Bounds stay below 2^62, so adding two never overflows; anything
  // larger, and anything that depends on the launch (program_id, grid_extent) or on memory, is
  // unknown. Sound for kernels the interpreter runs to the end (an i64 div/rem there has
  // operands >= 0, so its result is at most its dividend). counted_loop uses it to keep the
  // plain loop form where iv + step cannot overflow.
  static constexpr uint64_t kBoundLimit = uint64_t(1) << 62;
  std::optional<uint64_t> magnitude(const Expr& e) const {
    auto known = [](uint64_t v) { return v < kBoundLimit ? std::optional<uint64_t>(v) : std::nullopt; };
    auto arg = [&](size_t i) { return magnitude(*e.args[i]); };
    if (e.type != Type{ScalarType::i64, 1}) return std::nullopt;
    switch (e.op) {
      case Op::Const: return known(e.imm_i < 0 ? 0 - static_cast<uint64_t>(e.imm_i) : static_cast<uint64_t>(e.imm_i));
      case Op::ThreadId: return known(static_cast<uint64_t>(k.team));
      case Op::Table: {
        uint64_t m = 0;
        for (int64_t v : k.tables[static_cast<size_t>(e.index)]) m = std::max(m, v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v));
        return known(m);
      }
      case Op::Var: return local_bound[static_cast<size_t>(e.index)];
      case Op::Add: case Op::Sub: {
        auto a = arg(0), b = arg(1);
        return a && b ? known(*a + *b) : std::nullopt;
      }
      case Op::Mul: {
        auto a = arg(0), b = arg(1);
        if (!a || !b) return std::nullopt;
        return *b == 0 || *a <= kBoundLimit / *b ? known(*a * *b) : std::nullopt;
      }
      case Op::Div: case Op::Rem: return arg(0);
      case Op::Min: case Op::Max: {
        auto a = arg(0), b = arg(1);
        return a && b ? std::optional<uint64_t>(std::max(*a, *b)) : std::nullopt;
      }
      case Op::Select: {
        auto a = arg(1), b = arg(2);
        return a && b ? std::optional<uint64_t>(std::max(*a, *b)) : std::nullopt;
      }
      default: return std::nullopt;
    }
  }

  // local_bound for every local: the largest bound over its assignments (a loop variable: over
  // its begin and end), to a fixed point. A local whose bound still grows after many rounds
  // (n = n + 1 in a loop) becomes unknown; unknowns only spread, so this ends.
  void bound_locals() {
    local_bound.assign(k.locals.size(), uint64_t{0});
    std::vector<int> grew(k.locals.size(), 0);
    bool changed = true;
    std::function<void(const std::vector<Stmt>&)> walk = [&](const std::vector<Stmt>& body) {
      for (const Stmt& s : body) {
        auto widen = [&](int local, std::optional<uint64_t> v) {
          std::optional<uint64_t>& b = local_bound[static_cast<size_t>(local)];
          if (!b) return;
          if (!v || grew[static_cast<size_t>(local)] > 64) {
            b = std::nullopt;
            changed = true;
          } else if (*v > *b) {
            b = *v;
            ++grew[static_cast<size_t>(local)];
            changed = true;
          }
        };
        if (s.kind == StmtKind::Assign) widen(s.target, magnitude(*s.value));
        if (s.kind == StmtKind::For) {
          auto b = magnitude(*s.begin), e = magnitude(*s.end);
          widen(s.target, b && e ? std::optional<uint64_t>(std::max(*b, *e)) : std::nullopt);
        }
        walk(s.body);
        walk(s.else_body);
      }
    };
    while (changed) {
      changed = false;
      walk(k.body);
    }
  }

  llvm::Type* scalar(ScalarType t) {
    switch (t) {
      case ScalarType::f64: return B.getDoubleTy();
      case ScalarType::f32: return B.getFloatTy();
      case ScalarType::f16: return B.getHalfTy();
      case ScalarType::bf16: return B.getInt16Ty();  // bit pattern; converted by integer ops below
      case ScalarType::i64: return B.getInt64Ty();
      case ScalarType::boolean: return B.getInt1Ty();
      case ScalarType::i32: return B.getInt32Ty();
    }
    return nullptr;
  }
  llvm::Type* type(Type t) {
    llvm::Type* s = scalar(t.scalar);
    return t.lanes == 1 ? s : llvm::FixedVectorType::get(s, static_cast<unsigned>(t.lanes));
  }
  llvm::Value* splat_int(Type t, int64_t bits, unsigned width) {
    llvm::Value* c = B.getIntN(width, static_cast<uint64_t>(bits));
    return t.lanes == 1 ? c : B.CreateVectorSplat(static_cast<unsigned>(t.lanes), c);
  }

  // `result_type`, a vector of a multiple of `width` lanes, computed `width` lanes at a time: f
  // takes the `width`-lane parts of the operands (vectors of the same lane count) at one offset.
  // For AVX-512 instructions that LLVM has at one width only (by_16_lanes: 16 f32 or i32 lanes).
  llvm::Value* by_16_lanes(llvm::Type* result_type, const std::vector<llvm::Value*>& operands,
                           const std::function<llvm::Value*(const std::vector<llvm::Value*>&)>& f) {
    return by_lanes(16, result_type, operands, f);
  }
  llvm::Value* by_lanes(unsigned width, llvm::Type* result_type, const std::vector<llvm::Value*>& operands,
                        const std::function<llvm::Value*(const std::vector<llvm::Value*>&)>& f) {
    const unsigned lanes = llvm::cast<llvm::FixedVectorType>(result_type)->getNumElements();
    llvm::Value* out = llvm::PoisonValue::get(result_type);
    for (unsigned at = 0; at < lanes; at += width) {
      std::vector<llvm::Value*> parts;
      for (llvm::Value* x : operands) {
        llvm::Type* elem = llvm::cast<llvm::FixedVectorType>(x->getType())->getElementType();
        parts.push_back(B.CreateExtractVector(llvm::FixedVectorType::get(elem, width), x, B.getInt64(at)));
      }
      out = B.CreateInsertVector(result_type, out, f(parts), B.getInt64(at));
    }
    return out;
  }

  // f32 -> bf16 bits with round-to-nearest-even; NaN becomes a quiet NaN. Same algorithm as
  // ir/float_bits.hpp. The NaN case is chosen before the shift, and tested with one unordered
  // compare, so that a round trip back to f32 folds to one mask (and 0xffff0000) of the selected
  // word: 7 vector operations per rounding on AVX-512 instead of 10.
  llvm::Value* f32_to_bf16(llvm::Value* v, Type t) {
    Type it{ScalarType::i64, t.lanes};  // only for lane count
    auto i32 = [&](int64_t c) { return splat_int(it, c, 32); };
    llvm::Type* i32t = t.lanes == 1 ? static_cast<llvm::Type*>(B.getInt32Ty())
                                    : llvm::FixedVectorType::get(B.getInt32Ty(), static_cast<unsigned>(t.lanes));
    llvm::Value* x = B.CreateBitCast(v, i32t);
    llvm::Value* is_nan = B.CreateFCmpUNO(v, v);
    llvm::Value* lsb = B.CreateAnd(B.CreateLShr(x, i32(16)), i32(1));
    llvm::Value* rounded = B.CreateAdd(B.CreateAdd(x, i32(0x7fff)), lsb);
    llvm::Value* quiet_nan = B.CreateOr(x, i32(0x400000));
    llvm::Value* word = B.CreateSelect(is_nan, quiet_nan, rounded);
    return B.CreateTrunc(B.CreateLShr(word, i32(16)), type(Type{ScalarType::bf16, t.lanes}));
  }
  llvm::Value* bf16_to_f32(llvm::Value* v, Type t) {
    llvm::Type* i32t = t.lanes == 1 ? static_cast<llvm::Type*>(B.getInt32Ty())
                                    : llvm::FixedVectorType::get(B.getInt32Ty(), static_cast<unsigned>(t.lanes));
    llvm::Value* wide = B.CreateShl(B.CreateZExt(v, i32t), splat_int(Type{ScalarType::i64, t.lanes}, 16, 32));
    return B.CreateBitCast(wide, type(Type{ScalarType::f32, t.lanes}));
  }

  llvm::Value* intrinsic(llvm::Intrinsic::ID id, llvm::Type* t, std::vector<llvm::Value*> args) {
    return B.CreateIntrinsic(id, {t}, args);
  }

  llvm::Value* cast(llvm::Value* v, Type from, Type to) {
    const ScalarType f = from.scalar, t = to.scalar;
    llvm::Type* dst = type(to);
    if (f == ScalarType::i32 && t == ScalarType::i64) return B.CreateSExt(v, dst);
    if (f == ScalarType::i64 || f == ScalarType::i32) return B.CreateSIToFP(v, dst);
    if (t == ScalarType::i32) {
      // Round to nearest, ties to even; NaN and out-of-range lanes give INT32_MIN: x86's cvtps2dq,
      // one instruction where the host has it for this width (the 16-lane form with its rounding
      // given, {rn-sae}, also once per 16 lanes of a wider vector; the narrower ones round by
      // MXCSR, as every other operation here does).
      const HostConversions& host = host_conversions();
      auto cvt16 = [&](llvm::Value* x16) {
        llvm::Type* i32x16 = llvm::FixedVectorType::get(B.getInt32Ty(), 16);
        return B.CreateIntrinsic(llvm::Intrinsic::x86_avx512_mask_cvtps2dq_512, {},
                                 {x16, llvm::PoisonValue::get(i32x16), B.getInt16(0xffff), B.getInt32(8)});
      };
      if (from.scalar == ScalarType::f32 && from.lanes == 16 && host.avx512f) return cvt16(v);
      if (from.scalar == ScalarType::f32 && from.lanes % 16 == 0 && host.avx512f)  // 32, 48, ...: one per 16 lanes
        return by_16_lanes(dst, {v}, [&](const std::vector<llvm::Value*>& x) { return cvt16(x[0]); });
      if (from.scalar == ScalarType::f32 && from.lanes == 8 && host.avx)
        return B.CreateIntrinsic(llvm::Intrinsic::x86_avx_cvt_ps2dq_256, {}, {v});
      if (from.scalar == ScalarType::f32 && from.lanes == 4 && host.sse2)
        return B.CreateIntrinsic(llvm::Intrinsic::x86_sse2_cvtps2dq, {}, {v});
      // Elsewhere: fptosi is poison out of range, but select never picks those lanes.
      llvm::Value* r = intrinsic(llvm::Intrinsic::roundeven, type(from), {v});
      llvm::Value* lo = llvm::ConstantFP::get(type(from), -2147483648.0);
      llvm::Value* hi = llvm::ConstantFP::get(type(from), 2147483648.0);
      llvm::Value* fits = B.CreateAnd(B.CreateFCmpOGE(r, lo), B.CreateFCmpOLT(r, hi));
      return B.CreateSelect(fits, B.CreateFPToSI(r, dst), splat_int(to, INT32_MIN, 32));
    }
    if (f == ScalarType::bf16) {
      llvm::Value* w = bf16_to_f32(v, from);
      return t == ScalarType::f32 ? w : B.CreateFPExt(w, dst);
    }
    if (t == ScalarType::bf16) return f32_to_bf16(v, from);
    if (size_bytes(t) > size_bytes(f)) return B.CreateFPExt(v, dst);
    return B.CreateFPTrunc(v, dst);  // f64->f32, f32->f16: RNE
  }

  // The IR's ldexp (ir.hpp: x * 2^n rounded once, x a NaN or in +-[0.5, 2), n in [-250, 254]).
  // With AVX-512 one vscalefps per 16 lanes (8 and 4 with AVX512VL): x * 2^floor(float(n)),
  // rounded once to nearest even. Elsewhere x * 2^(n>>1) * 2^(n-(n>>1)), the powers built in
  // the exponent field: in the domain the first product is exact, so the second is the one
  // rounding.
  llvm::Value* ldexp(llvm::Value* x, llvm::Value* n, int lanes) {
    const HostConversions& host = host_conversions();
    auto scalef = [&](llvm::Value* xs, llvm::Value* ns, int w) -> llvm::Value* {
      llvm::Value* nf = B.CreateSIToFP(ns, xs->getType());
      if (w == 16)
        return B.CreateIntrinsic(llvm::Intrinsic::x86_avx512_mask_scalef_ps_512, {},
                                 {xs, nf, llvm::PoisonValue::get(xs->getType()), B.getInt16(0xffff), B.getInt32(8)});
      return B.CreateIntrinsic(w == 8 ? llvm::Intrinsic::x86_avx512_mask_scalef_ps_256 : llvm::Intrinsic::x86_avx512_mask_scalef_ps_128, {},
                               {xs, nf, llvm::PoisonValue::get(xs->getType()), B.getInt8(0xff)});
    };
    const int w = host.avx512f && lanes % 16 == 0 ? 16 : host.avx512f && host.avx512vl && (lanes == 8 || lanes == 4) ? lanes : 0;
    if (w == lanes) return scalef(x, n, w);
    if (w == 16)  // 32, 48, ... lanes: a vscalefps per 16
      return by_16_lanes(x->getType(), {x, n}, [&](const std::vector<llvm::Value*>& xn) { return scalef(xn[0], xn[1], 16); });
    const Type i32{ScalarType::i32, lanes};
    auto pow2 = [&](llvm::Value* k) { return B.CreateBitCast(B.CreateShl(B.CreateAdd(k, splat_int(i32, 127, 32)), splat_int(i32, 23, 32)), x->getType()); };
    llvm::Value* h = B.CreateAShr(n, splat_int(i32, 1, 32));
    return B.CreateFMul(B.CreateFMul(x, pow2(h)), pow2(B.CreateSub(n, h)));
  }

  // The IR's bf16_pair_dot (ir.hpp), lane by lane: (acc, x_odd, y_odd, x_even, y_even).
  // With avx512_bf16 the node is the instruction itself: each lane's two factors packed into one
  // 32-bit word (the odd one high, each a float's high half), one vdpbf16ps per 16, 8 or 4
  // lanes (fewer lanes padded with zeros). Elsewhere its meaning written out.
  // x_scalars, y_scalars: where present, the scalars whose broadcasts x's (y's) factor pair is.
  using ScalarPair = std::optional<std::pair<llvm::Value*, llvm::Value*>>;
  llvm::Value* bf16_pair_dot(const std::vector<llvm::Value*>& a, int lanes, ScalarPair x_scalars, ScalarPair y_scalars) {
    if (host_conversions().avx512bf16) {
      if (lanes > 16 && lanes % 16 == 0)
        return by_16_lanes(a[0]->getType(), a, [&](const std::vector<llvm::Value*>& p) { return vdpbf16ps(p, 16, {}, {}); });
      if (lanes <= 16) return vdpbf16ps(a, lanes, x_scalars, y_scalars);
    }
    const Type ft{ScalarType::f32, lanes}, it{ScalarType::i32, lanes};
    llvm::Type* ivec = type(it);
    auto f32 = [&](float c) -> llvm::Value* {
      llvm::Value* v = llvm::ConstantFP::get(B.getFloatTy(), c);
      return lanes == 1 ? v : B.CreateVectorSplat(static_cast<unsigned>(lanes), v);
    };
    auto sign_of = [&](llvm::Value* bits) { return B.CreateAnd(bits, splat_int(it, INT32_MIN, 32)); };
    // A factor's bf16 (high half), or acc; then a zero exponent field read as the zero of its sign.
    auto operand = [&](llvm::Value* x, bool factor) {
      llvm::Value* bits = B.CreateBitCast(x, ivec);
      if (factor) bits = B.CreateAnd(bits, splat_int(it, int64_t(int32_t(0xffff0000u)), 32));
      llvm::Value* zero_exponent = B.CreateICmpEQ(B.CreateAnd(bits, splat_int(it, 0x7f800000, 32)), splat_int(it, 0, 32));
      return B.CreateBitCast(B.CreateSelect(zero_exponent, sign_of(bits), bits), type(ft));
    };
    auto magnitude_below = [&](llvm::Value* x, float bound) {
      return B.CreateFCmpOLT(intrinsic(llvm::Intrinsic::fabs, type(ft), {x}), f32(bound));
    };
    // fma, flushed where the sum rounded to 24 bits with an unbounded exponent is below 2^-126:
    // where IEEE's rounding gives +-2^-126 the step scaled by 2^64 (exact: see ir.hpp) decides.
    auto step = [&](llvm::Value* x, llvm::Value* y, llvm::Value* acc) {
      llvm::Value* r = intrinsic(llvm::Intrinsic::fma, type(ft), {x, y, acc});
      llvm::Value* at_edge = B.CreateFCmpOEQ(intrinsic(llvm::Intrinsic::fabs, type(ft), {r}), f32(0x1p-126f));
      llvm::Value* scaled = intrinsic(llvm::Intrinsic::fma, type(ft),
                                      {B.CreateFMul(x, f32(0x1p32f)), B.CreateFMul(y, f32(0x1p32f)), B.CreateFMul(acc, f32(0x1p64f))});
      llvm::Value* flush = B.CreateOr(magnitude_below(r, 0x1p-126f), B.CreateAnd(at_edge, magnitude_below(scaled, 0x1p-62f)));
      return B.CreateSelect(flush, B.CreateBitCast(sign_of(B.CreateBitCast(r, ivec)), type(ft)), r);
    };
    llvm::Value* s = step(operand(a[1], true), operand(a[2], true), operand(a[0], false));
    return step(operand(a[3], true), operand(a[4], true), s);
  }
  // One vdpbf16ps over `lanes` <= 16 lanes of the operands (a 16-, 8- or 4-lane instruction, the
  // lanes past `lanes` zeros and dropped).
  llvm::Value* vdpbf16ps(const std::vector<llvm::Value*>& a, int lanes, ScalarPair x_scalars, ScalarPair y_scalars) {
    const int w = lanes <= 4 ? 4 : lanes <= 8 ? 8 : 16;
    llvm::Type* fw = llvm::FixedVectorType::get(B.getFloatTy(), unsigned(w));
    llvm::Type* iw = llvm::FixedVectorType::get(B.getInt32Ty(), unsigned(w));
    auto widen = [&](llvm::Value* x) -> llvm::Value* {
      if (lanes == w) return x;
      if (lanes == 1) return B.CreateInsertElement(llvm::Constant::getNullValue(fw), x, uint64_t(0));
      std::vector<int> mask(static_cast<size_t>(w), 0);
      for (int l = 0; l < w; ++l) mask[size_t(l)] = l < lanes ? l : lanes;  // lane `lanes` of the zeros
      return B.CreateShuffleVector(x, llvm::Constant::getNullValue(x->getType()), mask);
    };
    llvm::Type* words = llvm::FixedVectorType::get(B.getBFloatTy(), unsigned(2 * w));
    auto pack = [&](llvm::Value* odd, llvm::Value* even, const ScalarPair& scalars) {
      if (scalars) {  // the word of two scalars, splat (the lanes past `lanes` too: they are dropped)
        llvm::Value* high = B.CreateAnd(B.CreateBitCast(scalars->first, B.getInt32Ty()), B.getInt32(0xffff0000u));
        llvm::Value* low = B.CreateLShr(B.CreateBitCast(scalars->second, B.getInt32Ty()), B.getInt32(16));
        return B.CreateBitCast(B.CreateVectorSplat(unsigned(w), B.CreateOr(high, low)), words);
      }
      llvm::Value* high = B.CreateAnd(B.CreateBitCast(widen(odd), iw), B.CreateVectorSplat(unsigned(w), B.getInt32(0xffff0000u)));
      llvm::Value* low = B.CreateLShr(B.CreateBitCast(widen(even), iw), B.CreateVectorSplat(unsigned(w), B.getInt32(16)));
      return B.CreateBitCast(B.CreateOr(high, low), words);
    };
    const llvm::Intrinsic::ID id = w == 16 ? llvm::Intrinsic::x86_avx512bf16_dpbf16ps_512
                                   : w == 8 ? llvm::Intrinsic::x86_avx512bf16_dpbf16ps_256
                                            : llvm::Intrinsic::x86_avx512bf16_dpbf16ps_128;
    llvm::Value* r = B.CreateIntrinsic(id, {}, {widen(a[0]), pack(a[1], a[3], x_scalars), pack(a[2], a[4], y_scalars)});
    if (lanes == w) return r;
    if (lanes == 1) return B.CreateExtractElement(r, uint64_t(0));
    std::vector<int> mask(static_cast<size_t>(lanes), 0);
    for (int l = 0; l < lanes; ++l) mask[size_t(l)] = l;
    return B.CreateShuffleVector(r, mask);
  }

  // Values of one expression, one per instance in flight.
  std::vector<llvm::Value*> expr(const Expr& e) {
    if (auto it = memo.find(&e); it != memo.end()) return it->second;
    std::vector<llvm::Value*> out(static_cast<size_t>(R));
    std::vector<std::vector<llvm::Value*>> a;
    for (const ExprRef& arg : e.args) a.push_back(expr(*arg));
    const Type t = e.type;
    const bool fp = is_float(t.scalar);
    for (int i = 0; i < R; ++i) {
      auto A = [&](size_t j) { return a[j][static_cast<size_t>(i)]; };
      llvm::Value* v = nullptr;
      switch (e.op) {
        case Op::Const:
          if (fp) v = llvm::ConstantFP::get(scalar(t.scalar), e.imm_f);
          else v = llvm::ConstantInt::get(scalar(t.scalar), static_cast<uint64_t>(e.imm_i), true);
          if (t.lanes > 1) v = B.CreateVectorSplat(static_cast<unsigned>(t.lanes), v);
          break;
        case Op::Var:
          v = B.CreateLoad(type(t), local_ptr(e.index, i));
          break;
        case Op::ThreadId:
          v = thread;
          break;
        case Op::ShuffleDown:
        case Op::ShuffleXor: {
          llvm::Value* offset = B.getInt64(static_cast<uint64_t>(e.imm_i));
          llvm::Value* from = e.op == Op::ShuffleDown ? B.CreateAdd(thread, offset) : B.CreateXor(thread, offset);
          // CUDA's rule: a source outside the reading thread's warp reads the thread's own value.
          llvm::Value* same_warp = B.CreateICmpEQ(B.CreateLShr(from, 5), B.CreateLShr(thread, 5));
          llvm::Value* inside = B.CreateAnd(same_warp, B.CreateICmpSLT(from, B.getInt64(static_cast<uint64_t>(k.team))));
          llvm::Value* source = B.CreateSelect(inside, from, thread);
          v = B.CreateLoad(type(t), B.CreateGEP(type(t), snapshots.at(e.index), source));
          break;
        }
        case Op::ProgramId:
          v = pid[static_cast<size_t>(i)][static_cast<size_t>(e.index)];
          break;
        case Op::GridExtent:
          v = B.CreateLoad(B.getInt64Ty(), B.CreateGEP(B.getInt64Ty(), extents_arg, B.getInt64(static_cast<uint64_t>(e.index))));
          break;
        case Op::LaunchRows:  // after the grid's extents (llvm_backend.hpp, EntryFn)
          v = B.CreateLoad(B.getInt64Ty(), B.CreateGEP(B.getInt64Ty(), extents_arg, B.getInt64(static_cast<uint64_t>(k.grid_rank))));
          break;
        case Op::LaunchSize:  // after the rows (llvm_backend.hpp, EntryFn)
          v = B.CreateLoad(B.getInt64Ty(),
                           B.CreateGEP(B.getInt64Ty(), extents_arg, B.getInt64(static_cast<uint64_t>(k.grid_rank + 1 + e.index))));
          break;
        case Op::Load: {
          llvm::Type* elem = scalar(t.scalar);
          llvm::Value* p = B.CreateGEP(elem, buffers[static_cast<size_t>(e.index)][static_cast<size_t>(i)], A(0));
          v = B.CreateAlignedLoad(type(t), p, llvm::Align(static_cast<uint64_t>(size_bytes(t.scalar))));
          break;
        }
        case Op::Gather: {
          // Lane by lane; LLVM may form a hardware gather. Every lane is read: there is no mask.
          llvm::Type* elem = scalar(t.scalar);
          llvm::Value* base = buffers[static_cast<size_t>(e.index)][static_cast<size_t>(i)];
          const llvm::Align align(static_cast<uint64_t>(size_bytes(t.scalar)));
          if (t.lanes == 1) {  // a one-lane value is an LLVM scalar: one load
            v = B.CreateAlignedLoad(elem, B.CreateGEP(elem, base, A(0)), align);
            break;
          }
          v = B.CreateMaskedGather(type(t), B.CreateGEP(elem, base, A(0)), align);
          break;
        }
        case Op::Iota: {
          std::vector<llvm::Constant*> lanes;
          for (int l = 0; l < t.lanes; ++l) lanes.push_back(B.getInt64(uint64_t(l)));
          v = t.lanes == 1 ? static_cast<llvm::Value*>(lanes[0]) : llvm::ConstantVector::get(lanes);
          break;
        }
        case Op::Add: v = fp ? B.CreateFAdd(A(0), A(1)) : B.CreateAdd(A(0), A(1)); break;
        case Op::Sub: v = fp ? B.CreateFSub(A(0), A(1)) : B.CreateSub(A(0), A(1)); break;
        case Op::Mul: v = fp ? B.CreateFMul(A(0), A(1)) : B.CreateMul(A(0), A(1)); break;
        case Op::Div: v = fp ? B.CreateFDiv(A(0), A(1)) : B.CreateSDiv(A(0), A(1)); break;
        case Op::Rem: v = B.CreateSRem(A(0), A(1)); break;
        case Op::Fma: v = intrinsic(llvm::Intrinsic::fma, type(t), {A(0), A(1), A(2)}); break;
        case Op::Ldexp: v = ldexp(A(0), A(1), t.lanes); break;
        case Op::Bf16PairDot: {
          // A factor pair of two broadcast scalars packs as one scalar word, then splats: from
          // two adjacent bf16 elements LLVM makes that word one load.
          auto scalar_pair = [&](size_t odd, size_t even) -> std::optional<std::pair<llvm::Value*, llvm::Value*>> {
            if (e.args[odd]->op != Op::Broadcast || e.args[even]->op != Op::Broadcast) return std::nullopt;
            return std::make_pair(expr(*e.args[odd]->args[0])[size_t(i)], expr(*e.args[even]->args[0])[size_t(i)]);
          };
          v = bf16_pair_dot({A(0), A(1), A(2), A(3), A(4)}, t.lanes, scalar_pair(1, 3), scalar_pair(2, 4));
          break;
        }
        case Op::Sqrt: v = intrinsic(llvm::Intrinsic::sqrt, type(t), {A(0)}); break;
        case Op::Floor: v = intrinsic(llvm::Intrinsic::floor, type(t), {A(0)}); break;
        case Op::Neg: v = B.CreateFNeg(A(0)); break;
        case Op::Min:
          v = fp ? intrinsic(llvm::Intrinsic::minimum, type(t), {A(0), A(1)}) : B.CreateSelect(B.CreateICmpSLT(A(0), A(1)), A(0), A(1));
          break;
        case Op::Max:
          v = fp ? intrinsic(llvm::Intrinsic::maximum, type(t), {A(0), A(1)}) : B.CreateSelect(B.CreateICmpSGT(A(0), A(1)), A(0), A(1));
          break;
        case Op::Lt: case Op::Le: case Op::Eq: case Op::Ne: {
          const bool fcmp = is_float(e.args[0]->type.scalar);
          using P = llvm::CmpInst::Predicate;
          P p = e.op == Op::Lt   ? (fcmp ? P::FCMP_OLT : P::ICMP_SLT)
                : e.op == Op::Le ? (fcmp ? P::FCMP_OLE : P::ICMP_SLE)
                : e.op == Op::Eq ? (fcmp ? P::FCMP_OEQ : P::ICMP_EQ)
                                 : (fcmp ? P::FCMP_UNE : P::ICMP_NE);
          v = fcmp ? B.CreateFCmp(p, A(0), A(1)) : B.CreateICmp(p, A(0), A(1));
          break;
        }
        case Op::And: v = B.CreateAnd(A(0), A(1)); break;
        case Op::Or: v = B.CreateOr(A(0), A(1)); break;
        case Op::Shl: v = B.CreateShl(A(0), A(1)); break;
        case Op::Shr: v = B.CreateAShr(A(0), A(1)); break;
        case Op::BitAnd: v = B.CreateAnd(A(0), A(1)); break;
        case Op::Bitcast: v = B.CreateBitCast(A(0), type(t)); break;
        case Op::Call:
          throw Error(fmt::format("{}: {} is device-only (CUDA's own approximation, with no definition off the GPU); this order runs on target cuda only",
                                  k.description.empty() ? k.name : k.description, name(static_cast<MathFn>(e.index))));
        case Op::Select: v = B.CreateSelect(A(0), A(1), A(2)); break;
        case Op::Cast:
          if (llvm::Value* looked_up = f32_table_lookup(e, i)) {
            v = looked_up;
            break;
          }
          v = cast(A(0), e.args[0]->type, t);
          break;
        // A 1-lane value is an LLVM scalar, not a vector: broadcasting to one lane, or extracting
        // lane 0 of a scalar, is the value itself.
        case Op::Broadcast: v = t.lanes == 1 ? A(0) : B.CreateVectorSplat(static_cast<unsigned>(t.lanes), A(0)); break;
        case Op::Extract:
          v = e.args[0]->type.lanes == 1 ? A(0) : B.CreateExtractElement(A(0), static_cast<uint64_t>(e.index));
          break;
        case Op::Table: {
          // One load per lane: a scalar load, or a gather of every lane (no mask; the verifier keeps
          // the index inside the table).
          llvm::GlobalVariable* g = tables[static_cast<size_t>(e.index)];
          const llvm::Align align(8);
          const std::vector<int64_t>& entries = k.tables[static_cast<size_t>(e.index)];
          if (t.lanes % 8 == 0 && entries.size() <= 32 && host_conversions().avx512f) {
            v = small_table(entries, A(0), t.lanes);
            break;
          }
          if (t.lanes == 1)
            v = B.CreateAlignedLoad(B.getInt64Ty(), B.CreateGEP(g->getValueType(), g, {B.getInt64(0), A(0)}), align);
          else
            v = B.CreateMaskedGather(type(t), B.CreateGEP(B.getInt64Ty(), g, A(0)), align);
          break;
        }
      }
      out[static_cast<size_t>(i)] = v;
    }
    memo.emplace(&e, out);
    return out;
  }

  // Op::Table of at most 32 entries at 8*k lanes on AVX-512, from registers instead of memory:
  // each 8-lane part is two vpermi2q (entries 0-15 and 16-31, picked by the index's low 4 bits)
  // and a select on its bit 4. An index inside the table reads the lane a load would (one outside
  // it is an error of the IR, which the interpreter reports).
  llvm::Value* small_table(const std::vector<int64_t>& entries, llvm::Value* index, int lanes) {
    auto quarter = [&](size_t first) {
      std::vector<llvm::Constant*> c;
      for (size_t i = first; i < first + 8; ++i) c.push_back(B.getInt64(i < entries.size() ? static_cast<uint64_t>(entries[i]) : 0));
      return llvm::ConstantVector::get(c);
    };
    llvm::Value* q[4] = {quarter(0), quarter(8), quarter(16), quarter(24)};
    llvm::Type* result = llvm::FixedVectorType::get(B.getInt64Ty(), unsigned(lanes));
    return by_lanes(8, result, {index}, [&](const std::vector<llvm::Value*>& at) {
      llvm::Value* low = B.CreateIntrinsic(llvm::Intrinsic::x86_avx512_vpermi2var_q_512, {}, {q[0], at[0], q[1]});
      if (entries.size() <= 16) return low;
      llvm::Value* high = B.CreateIntrinsic(llvm::Intrinsic::x86_avx512_vpermi2var_q_512, {}, {q[2], at[0], q[3]});
      llvm::Value* upper = B.CreateICmpNE(B.CreateAnd(at[0], B.CreateVectorSplat(8, B.getInt64(16))),
                                          llvm::Constant::getNullValue(at[0]->getType()));
      return B.CreateSelect(upper, high, low);
    });
  }

  // cast<f32>(bitcast<f64>(table[i])) over a table of at most 32 entries that are all f32 values
  // (gen/ stores an f32 constant table so: an i64 table of f64 bits), 16*k lanes on AVX-512: one
  // vpermi2ps per 16 lanes on the f32 values themselves. The same lanes as the nodes it stands
  // for (the conversion is exact for such entries); nullptr where the pattern does not hold.
  llvm::Value* f32_table_lookup(const Expr& e, int part) {
    if (e.type.scalar != ScalarType::f32 || e.type.lanes % 16 != 0 || !host_conversions().avx512f) return nullptr;
    const Expr& bits = *e.args[0];
    if (bits.op != Op::Bitcast || bits.type.scalar != ScalarType::f64 || bits.args[0]->op != Op::Table) return nullptr;
    const Expr& lookup = *bits.args[0];
    const std::vector<int64_t>& entries = k.tables[static_cast<size_t>(lookup.index)];
    if (entries.size() > 32) return nullptr;
    std::vector<llvm::Constant*> values;
    for (int64_t entry : entries) {
      const double d = std::bit_cast<double>(entry);
      const float f = static_cast<float>(d);
      if (static_cast<double>(f) != d && !(std::isnan(d) && std::isnan(f))) return nullptr;  // not an f32 value: the general path
      values.push_back(llvm::ConstantFP::get(B.getFloatTy(), f));
    }
    while (values.size() < 32) values.push_back(llvm::ConstantFP::get(B.getFloatTy(), 0.0));
    llvm::Value* low = llvm::ConstantVector::get(llvm::ArrayRef<llvm::Constant*>(values).slice(0, 16));
    llvm::Value* high = llvm::ConstantVector::get(llvm::ArrayRef<llvm::Constant*>(values).slice(16, 16));
    llvm::Value* index = expr(*lookup.args[0])[static_cast<size_t>(part)];
    return by_16_lanes(type(e.type), {index}, [&](const std::vector<llvm::Value*>& at) {
      llvm::Value* i32 = B.CreateTrunc(at[0], llvm::FixedVectorType::get(B.getInt32Ty(), 16));
      return B.CreateIntrinsic(llvm::Intrinsic::x86_avx512_vpermi2var_ps_512, {}, {low, i32, high});
    });
  }

  void stmts(const std::vector<Stmt>& body) {
    for (const Stmt& s : body) stmt(s);
  }

  void stmt(const Stmt& s) {
    memo.clear();
    switch (s.kind) {
      case StmtKind::Assign: {
        std::vector<llvm::Value*> v = expr(*s.value);
        for (int i = 0; i < R; ++i) B.CreateStore(v[size_t(i)], local_ptr(s.target, i));
        break;
      }
      case StmtKind::Store: {
        std::vector<llvm::Value*> idx = expr(*s.index), v = expr(*s.value);
        const ScalarType st = k.buffers[size_t(s.target)].elem;
        for (int i = 0; i < R; ++i) {
          const llvm::Align align(static_cast<uint64_t>(size_bytes(st)));
          if (s.index->type.lanes > 1) {
            // A scatter: llvm.masked.scatter with every lane on writes lanes in lane order where
            // two share an address (LangRef), the IR's rule; a hardware scatter where there is one.
            llvm::Value* ptrs = B.CreateGEP(scalar(st), buffers[size_t(s.target)][size_t(i)], idx[size_t(i)]);
            B.CreateMaskedScatter(v[size_t(i)], ptrs, align);
            continue;
          }
          llvm::Value* p = B.CreateGEP(scalar(st), buffers[size_t(s.target)][size_t(i)], idx[size_t(i)]);
          const uint64_t vector_bytes = uint64_t(s.value->type.lanes) * uint64_t(size_bytes(st));
          if (s.value->type.lanes > 1 && k.buffers[size_t(s.target)].extent == Extent::rows_by_cols) {
            // Large outputs bypass the cache (non-temporal), chosen per launch; same bits. x86's
            // vector non-temporal store needs an address aligned to the vector's size; LLVM
            // splits a misaligned one into 8-byte movnti, 8 of them and their extracts per 64
            // bytes, which still beats a cached store. So a streamed store tests its address.
            llvm::BasicBlock* stream_bb = llvm::BasicBlock::Create(ctx, "store.stream", fn);
            llvm::BasicBlock* aligned_bb = llvm::BasicBlock::Create(ctx, "store.stream.aligned", fn);
            llvm::BasicBlock* split_bb = llvm::BasicBlock::Create(ctx, "store.stream.split", fn);
            llvm::BasicBlock* cached_bb = llvm::BasicBlock::Create(ctx, "store.cached", fn);
            llvm::BasicBlock* done_bb = llvm::BasicBlock::Create(ctx, "store.done", fn);
            B.CreateCondBr(stream_outputs, stream_bb, cached_bb);
            // The streamed stores state alignments other than the cached store's: that keeps
            // InstCombine from merging them with it, which would drop the non-temporal hint.
            auto streamed = [&](llvm::BasicBlock* bb, uint64_t alignment) {
              B.SetInsertPoint(bb);
              llvm::StoreInst* nt = B.CreateAlignedStore(v[size_t(i)], p, llvm::Align(alignment));
              nt->setMetadata(llvm::LLVMContext::MD_nontemporal, llvm::MDNode::get(ctx, llvm::ConstantAsMetadata::get(B.getInt32(1))));
              B.CreateBr(done_bb);
            };
            B.SetInsertPoint(stream_bb);
            if (llvm::isPowerOf2_64(vector_bytes) && vector_bytes > align.value()) {
              llvm::Value* misalignment = B.CreateAnd(B.CreatePtrToInt(p, B.getInt64Ty()), B.getInt64(vector_bytes - 1));
              B.CreateCondBr(B.CreateICmpEQ(misalignment, B.getInt64(0)), aligned_bb, split_bb);
              streamed(aligned_bb, vector_bytes);
            } else {
              B.CreateBr(split_bb);
              aligned_bb->eraseFromParent();
            }
            streamed(split_bb, 1);
            B.SetInsertPoint(cached_bb);
            B.CreateAlignedStore(v[size_t(i)], p, align);
            B.CreateBr(done_bb);
            B.SetInsertPoint(done_bb);
          } else {
            B.CreateAlignedStore(v[size_t(i)], p, align);
          }
        }
        break;
      }
      case StmtKind::For: {
        // Bounds are uniform (verifier): instance 0's value is every instance's. A per-instance
        // loop's are not, and its kernel runs one instance at a time (jit.cpp).
        if (s.per_instance && R > 1)
          throw Error(fmt::format("internal: kernel {} has a per-instance loop and cannot run {} instances in lock step", k.name, R));
        llvm::Value* begin = expr(*s.begin)[0];
        llvm::Value* end = expr(*s.end)[0];
        memo.clear();
        const std::optional<uint64_t> end_bound = magnitude(*s.end);
        const bool end_fits = end_bound && *end_bound <= static_cast<uint64_t>(INT64_MAX - s.step + 1);
        counted_loop("for", begin, end, s.step, end_fits, [&](llvm::Value* iv) {
          for (int i = 0; i < R; ++i) B.CreateStore(iv, local_ptr(s.target, i));
          stmts(s.body);
          memo.clear();
        });
        break;
      }
      case StmtKind::If: {
        // A uniform condition (verifier): instance 0's value is every instance's. A per-instance
        // if's is not, and its kernel runs one instance at a time (jit.cpp).
        if (s.per_instance && R > 1)
          throw Error(fmt::format("internal: kernel {} has a per-instance if and cannot run {} instances in lock step", k.name, R));
        llvm::Value* cond = expr(*s.value)[0];
        memo.clear();
        llvm::BasicBlock* then_bb = llvm::BasicBlock::Create(ctx, "if.then", fn);
        llvm::BasicBlock* else_bb = llvm::BasicBlock::Create(ctx, "if.else", fn);
        llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx, "if.done", fn);
        B.CreateCondBr(cond, then_bb, else_bb);
        B.SetInsertPoint(then_bb);
        stmts(s.body);
        B.CreateBr(done);
        B.SetInsertPoint(else_bb);
        stmts(s.else_body);
        B.CreateBr(done);
        B.SetInsertPoint(done);
        memo.clear();
        break;
      }
      case StmtKind::Region:
        stmts(s.body);
        break;
      case StmtKind::Team: {
        const llvm::DataLayout& dl = fn->getParent()->getDataLayout();
        for (int64_t local : shuffled_locals(s)) {
          llvm::Type* lt = type(k.locals[static_cast<size_t>(local)].type);
          llvm::AllocaInst*& copy = snapshots[local];
          if (!copy) {  // one copy per shuffled local, in the entry block like every other alloca
            llvm::IRBuilder<> EB(entry_block, entry_block->begin());
            copy = EB.CreateAlloca(lt, EB.getInt64(static_cast<uint64_t>(k.team)), k.locals[static_cast<size_t>(local)].name + ".shuffled");
          }
          llvm::AllocaInst* live = locals[static_cast<size_t>(local)][0];
          B.CreateMemCpy(copy, copy->getAlign(), live, live->getAlign(), dl.getTypeAllocSize(lt) * static_cast<uint64_t>(k.team));
        }
        memo.clear();
        counted_loop("team", B.getInt64(0), B.getInt64(static_cast<uint64_t>(k.team)), 1, /*end_fits=*/true, [&](llvm::Value* t) {
          thread = t;
          stmts(s.body);
          memo.clear();
        });
        thread = nullptr;
        break;
      }
    }
  }

  // Where local `l` of instance i lives: its alloca, or this thread's element of its array.
  llvm::Value* local_ptr(int64_t l, int i) {
    llvm::AllocaInst* a = locals[static_cast<size_t>(l)][static_cast<size_t>(i)];
    if (!per_thread[static_cast<size_t>(l)]) return a;
    return B.CreateGEP(type(k.locals[static_cast<size_t>(l)].type), a, thread);
  }
  // The body for R instances: flat + i for i < R, clamped to end - 1. When fewer than R
  // instances are left, the spare lanes of the group recompute the last one and store the
  // same bits to the same addresses, so one copy of the body serves every row count.
  void instances(llvm::Value* extents, llvm::Value* flat, llvm::Value* last) {
    pid.assign(size_t(R), std::vector<llvm::Value*>(size_t(k.grid_rank)));
    for (int i = 0; i < R; ++i) {
      llvm::Value* want = B.CreateAdd(flat, B.getInt64(uint64_t(i)));
      llvm::Value* rest = i == 0 ? want : B.CreateSelect(B.CreateICmpSLT(want, last), want, last);
      for (int d = k.grid_rank - 1; d >= 0; --d) {
        if (d == 0) {
          pid[size_t(i)][0] = rest;
          break;
        }
        llvm::Value* ext = B.CreateLoad(B.getInt64Ty(), B.CreateGEP(B.getInt64Ty(), extents, B.getInt64(uint64_t(d))));
        pid[size_t(i)][size_t(d)] = B.CreateSRem(rest, ext);
        rest = B.CreateSDiv(rest, ext);
      }
    }
    stmts(k.body);
  }

  void allocate_locals(llvm::BasicBlock* entry) {
    entry_block = entry;
    llvm::IRBuilder<> EB(entry, entry->begin());
    locals.assign(k.locals.size(), {});
    per_thread = k.team > 1 ? per_thread_locals(k) : std::vector<char>(k.locals.size(), 0);
    for (size_t l = 0; l < k.locals.size(); ++l) {
      llvm::Value* count = per_thread[l] ? EB.getInt64(static_cast<uint64_t>(k.team)) : nullptr;
      for (int i = 0; i < R; ++i) locals[l].push_back(EB.CreateAlloca(type(k.locals[l].type), count, k.locals[l].name));
    }
  }

  // for (iv = begin; iv < end; iv += step) body(iv), with the IR's meaning (ir/interpret.cpp):
  // iv takes the values begin + j*step that are below end, computed exactly, and never wraps
  // around. The plain loop (test iv < end, then iv += step) means exactly that when iv + step
  // cannot overflow, that is when end <= INT64_MAX - step + 1: then every iv below end has room.
  // That holds for an end whose magnitude() is below that bound (every loop gen/ writes: their
  // ends come from constants and tables), and for the rows of a launch (the runtime keeps them
  // far below 2^63); the caller says so with `end_fits`. Any other end, where a
  // wrapping iv + step would restart below end and loop (nearly) forever, gets a loop that
  // counts its trips instead:
  //   trips = end > begin ? (end - begin - 1) / step + 1 : 0
  // where end - begin, for end > begin, is exact as an unsigned 64-bit number; iv follows as a
  // second induction variable, whose increment after the last trip may wrap and is never used.
  template <class F>
  void counted_loop(const char* name, llvm::Value* begin, llvm::Value* end, int64_t step, bool end_fits, F&& body) {
    llvm::Value* step_v = B.getInt64(static_cast<uint64_t>(step));
    llvm::Value* trips = nullptr;
    if (!end_fits) {
      llvm::Value* span = B.CreateSub(end, begin);
      trips = B.CreateSelect(B.CreateICmpSGT(end, begin),
                             B.CreateAdd(B.CreateUDiv(B.CreateSub(span, B.getInt64(1)), step_v), B.getInt64(1)), B.getInt64(0),
                             std::string(name) + ".trips");
    }
    llvm::BasicBlock* pre = B.GetInsertBlock();
    llvm::BasicBlock* head = llvm::BasicBlock::Create(ctx, std::string(name) + ".head", fn);
    llvm::BasicBlock* body_bb = llvm::BasicBlock::Create(ctx, std::string(name) + ".body", fn);
    llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx, std::string(name) + ".exit", fn);
    B.CreateBr(head);
    B.SetInsertPoint(head);
    llvm::PHINode* trip = trips ? B.CreatePHI(B.getInt64Ty(), 2, std::string(name) + ".trip") : nullptr;
    llvm::PHINode* iv = B.CreatePHI(B.getInt64Ty(), 2, name);
    iv->addIncoming(begin, pre);
    if (trip) {
      trip->addIncoming(B.getInt64(0), pre);
      B.CreateCondBr(B.CreateICmpULT(trip, trips), body_bb, exit);
    } else {
      B.CreateCondBr(B.CreateICmpSLT(iv, end), body_bb, exit);
    }
    B.SetInsertPoint(body_bb);
    body(iv);
    if (trip) trip->addIncoming(B.CreateAdd(trip, B.getInt64(1), "", /*HasNUW=*/true, /*HasNSW=*/true), B.GetInsertBlock());
    iv->addIncoming(B.CreateAdd(iv, step_v), B.GetInsertBlock());
    B.CreateBr(head);
    B.SetInsertPoint(exit);
  }

  // for (f = begin; f < end; f += R) { R instances }
  void instance_loop(llvm::Value* extents, llvm::Value* begin, llvm::Value* end) {
    llvm::Value* last = B.CreateSub(end, B.getInt64(1));
    // end <= rows of the launch <= kMaxElements (ordo/ordo.hpp), far from INT64_MAX.
    counted_loop("rows", begin, end, R, /*end_fits=*/true, [&](llvm::Value* f) { instances(extents, f, last); });
  }
};

}  // namespace

// void name(ptr buffers, ptr extents, i64 begin, i64 end, i64 flags)
llvm::Function* lower(llvm::Module& mod, const Kernel& k, const std::string& symbol, int rows_in_flight) {
  llvm::LLVMContext& ctx = mod.getContext();
  Lowerer L(ctx, k);
  llvm::Type* ptr = llvm::PointerType::getUnqual(ctx);
  auto* fty = llvm::FunctionType::get(L.B.getVoidTy(), {ptr, ptr, L.B.getInt64Ty(), L.B.getInt64Ty(), L.B.getInt64Ty()}, false);
  L.fn = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, symbol, mod);
  L.fn->addFnAttr(llvm::Attribute::NoUnwind);
  llvm::Argument* buffers = L.fn->getArg(0);
  llvm::Argument* extents = L.fn->getArg(1);
  llvm::Value* begin = L.fn->getArg(2);
  llvm::Value* end = L.fn->getArg(3);
  llvm::Value* flags = L.fn->getArg(4);
  L.extents_arg = extents;

  for (const std::vector<int64_t>& t : k.tables) {
    std::vector<uint64_t> bits(t.begin(), t.end());
    llvm::Constant* init = llvm::ConstantDataArray::get(ctx, bits);
    L.tables.push_back(new llvm::GlobalVariable(mod, init->getType(), true, llvm::GlobalValue::PrivateLinkage, init,
                                                symbol + ".table"));
  }
  llvm::BasicBlock* entry = llvm::BasicBlock::Create(ctx, "entry", L.fn);
  L.B.SetInsertPoint(entry);
  L.stream_outputs = L.B.CreateICmpNE(L.B.CreateAnd(flags, L.B.getInt64(kStreamOutputs)), L.B.getInt64(0));
  // Arguments come first in the pointer array; each instance in flight has its own scratch.
  L.R = rows_in_flight;
  if (k.team > 1 && L.R != 1) throw Error(fmt::format("internal: team kernel {} lowered with {} instances in flight", k.name, L.R));
  for (size_t b = 0; b < k.buffers.size(); ++b) {
    const Buffer& buf = k.buffers[b];
    if (is_argument(buf)) {
      llvm::Value* p = L.B.CreateLoad(ptr, L.B.CreateGEP(ptr, buffers, L.B.getInt64(b)), buf.name);
      L.buffers.push_back(std::vector<llvm::Value*>(size_t(L.R), p));
      continue;
    }
    std::vector<llvm::Value*> per_instance;
    for (int i = 0; i < L.R; ++i) {
      llvm::AllocaInst* a = L.B.CreateAlloca(L.scalar(buf.elem), L.B.getInt64(uint64_t(buf.per_row)), buf.name);
      a->setAlignment(llvm::Align(64));
      per_instance.push_back(a);
    }
    L.buffers.push_back(std::move(per_instance));
  }
  L.bound_locals();
  L.allocate_locals(entry);
  L.instance_loop(extents, begin, end);
  L.B.CreateRetVoid();

  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyFunction(*L.fn, &os)) throw Error(fmt::format("internal: LLVM rejected the lowering of {}: {}", k.name, os.str()));
  return L.fn;
}

}  // namespace ordo::llvm_backend
