// IR-only tests: builder, printer, verifier, interpreter, float conversions. No backend.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "gen/gen.hpp"
#include "gen/blocks/reductions.hpp"
#include "ir/error.hpp"
#include "ir/float_bits.hpp"
#include "ir/interpret.hpp"
#include "ir/ir.hpp"

using namespace ordo;
using namespace ordo::ir;

namespace {
const Type f32{ScalarType::f32, 1}, f32x8{ScalarType::f32, 8}, i64{ScalarType::i64, 1};

// A kernel with one f32 input row of n and one f32 output per row, body filled by `fill`.
template <class F>
Kernel row_kernel(F&& fill) {
  Kernel k;
  k.name = std::string("t");  // not `= "t"`: GCC 12 warns falsely (-Wrestrict) on that form
  Builder b(k);
  int x = b.buffer("x", ScalarType::f32, false, Extent::rows_by_cols);
  int out = b.buffer("out", ScalarType::f32, true, Extent::rows);
  fill(b, x, out);
  return k;
}
}  // namespace

TEST_CASE("verifier accepts a well-formed kernel and names the node it rejects") {
  Kernel good = row_kernel([](Builder& b, int x, int out) {
    ExprRef v = b.let("v", load(b.kernel(), x, index_const(0)));
    b.store(out, program_id(0), add(v, v));
  });
  CHECK(verify(good).empty());

  Kernel mixed = row_kernel([](Builder& b, int x, int out) {
    ExprRef v = load(b.kernel(), x, index_const(0), 8);
    b.store(out, program_id(0), extract(add(v, broadcast(load(b.kernel(), x, index_const(0)), 4)), 0));
  });
  std::string err = verify(mixed);
  CHECK(err.find("operand types f32x8 and f32x4 differ") != std::string::npos);
  CHECK(err.find("add(load.f32x8(x[0])") != std::string::npos);  // the message prints the node

  Kernel bf16_math = row_kernel([](Builder& b, int x, int out) {
    ExprRef h = cast(load(b.kernel(), x, index_const(0)), ScalarType::bf16);
    b.store(out, program_id(0), cast(add(h, h), ScalarType::f32));
  });
  CHECK(verify(bf16_math).find("arithmetic in bf16") != std::string::npos);

  Kernel unread = row_kernel([](Builder& b, int, int out) {
    int l = b.local("never", f32);
    b.store(out, program_id(0), b.get(l));
  });
  CHECK(verify(unread).find("read before it is assigned") != std::string::npos);

  Kernel divergent = row_kernel([](Builder& b, int, int out) {
    b.for_range("i", index_const(0), program_id(0), 1, [&](ExprRef) { b.store(out, program_id(0), constant(f32, 1)); });
  });
  CHECK(verify(divergent).find("loop bounds depend on program_id or data") != std::string::npos);

  Kernel data_if = row_kernel([](Builder& b, int x, int out) {
    b.if_(binary(Op::Lt, load(b.kernel(), x, index_const(0)), constant(f32, 0)),
          [&] { b.store(out, program_id(0), constant(f32, 1)); });
  });
  CHECK(verify(data_if).find("condition depends on program_id or data") != std::string::npos);

  Kernel store_input = row_kernel([](Builder& b, int x, int) { b.store(x, index_const(0), constant(f32, 1)); });
  CHECK(verify(store_input).find("buffer x is an input") != std::string::npos);

  Kernel bad_cast = row_kernel([](Builder& b, int x, int out) {
    ExprRef d = cast(load(b.kernel(), x, index_const(0)), ScalarType::f64);
    b.store(out, program_id(0), cast(cast(d, ScalarType::bf16), ScalarType::f32));
  });
  CHECK(verify(bad_cast).find("cast f64 -> bf16 is not allowed") != std::string::npos);

  Kernel bad_lane = row_kernel([](Builder& b, int x, int out) {
    b.store(out, program_id(0), extract(load(b.kernel(), x, index_const(0), 4), 4));
  });
  CHECK(verify(bad_lane).find("lane out of range") != std::string::npos);

  Kernel inexact = row_kernel([](Builder& b, int, int out) { b.store(out, program_id(0), constant(f32, 0.1)); });
  CHECK(verify(inexact).find("not exactly representable") != std::string::npos);

  // A grid coordinate typed as anything but a scalar i64 (fuzz_ir built an f32 grid_extent as an
  // fma operand, which the LLVM lowering then could not call).
  Kernel float_extent = row_kernel([](Builder& b, int x, int out) {
    auto extent = std::make_shared<Expr>(*grid_extent(0));
    extent->type = f32;
    b.store(out, program_id(0), fma(extent, load(b.kernel(), x, index_const(0)), constant(f32, 0)));
  });
  CHECK(verify(float_extent).find("grid_extent is a scalar i64") != std::string::npos);
}

// Per-instance loops (ir.hpp): the one place control flow may follow program_id, which causal
// attention uses to skip key blocks its queries cannot see.
TEST_CASE("per-instance loops: bounds read program_id, never data; each instance runs its own trips") {
  // out[row] = the number of trips of a loop over [0, 2 * row + 1).
  Kernel counted = row_kernel([](Builder& b, int, int out) {
    int n = b.local("n", f32);
    b.assign(n, constant(f32, 0));
    b.for_per_instance("i", index_const(0), add(mul(program_id(0), index_const(2)), index_const(1)), 1,
                       [&](ExprRef) { b.assign(n, add(b.get(n), constant(f32, 1))); });
    b.store(out, program_id(0), b.get(n));
  });
  REQUIRE(verify(counted).empty());
  CHECK(print(counted).find("for.instance %i in [0, add(mul(program_id(0), 2), 1))") != std::string::npos);
  CHECK(has_per_instance_control(counted));
  std::vector<float> x(4 * 3, 0.0f), trips(4, -1.0f);
  interpret(counted, {{x.data(), 12}, {trips.data(), 4}}, {4});
  CHECK(trips == std::vector<float>{1, 3, 5, 7});

  // Data, or a local computed from program_id, is still refused in the bounds.
  Kernel by_data;
  {
    Builder b(by_data);
    const int n = b.buffer("n", ScalarType::i64, false, Extent::rows);
    const int out = b.buffer("out", ScalarType::f32, true, Extent::rows);
    b.for_per_instance("i", index_const(0), load(by_data, n, program_id(0)), 1,
                       [&](ExprRef) { b.store(out, program_id(0), constant(f32, 1)); });
  }
  CHECK(verify(by_data).find("per-instance loop bounds read data or a varying local") != std::string::npos);
  Kernel by_local = row_kernel([](Builder& b, int, int out) {
    ExprRef row = b.let("row", program_id(0));
    b.for_per_instance("i", index_const(0), row, 1, [&](ExprRef) { b.store(out, program_id(0), constant(f32, 1)); });
  });
  CHECK(verify(by_local).find("per-instance loop bounds read data or a varying local") != std::string::npos);
  // Its variable varies between instances after the loop: no ordinary loop may be bounded by it.
  Kernel after = row_kernel([](Builder& b, int, int out) {
    ExprRef last;
    b.for_per_instance("i", index_const(0), program_id(0), 1, [&](ExprRef i) { last = i; });
    b.for_range("j", index_const(0), last, 1, [&](ExprRef) { b.store(out, program_id(0), constant(f32, 1)); });
  });
  CHECK(verify(after).find("loop bounds depend on program_id or data") != std::string::npos);
  // An ordinary kernel has none.
  Kernel plain = row_kernel([](Builder& b, int, int out) { b.store(out, program_id(0), constant(f32, 1)); });
  CHECK_FALSE(has_per_instance_control(plain));
}

// Per-instance ifs (ir.hpp): a condition on data, for guarded fast paths. What a branch assigns
// varies between instances afterwards, and only a per-instance if may test data.
TEST_CASE("per-instance ifs: the condition may read data; what a branch assigns varies afterwards") {
  // out[row] = 2 when x[row][0] > 0, else 3.
  Kernel guarded = row_kernel([](Builder& b, int x, int out) {
    int n = b.local("n", Type{ScalarType::i64, 1});
    ExprRef positive = binary(Op::Lt, constant(f32, 0), load(b.kernel(), x, mul(program_id(0), index_const(3))));
    b.if_else_per_instance(positive, [&] { b.assign(n, index_const(2)); }, [&] { b.assign(n, index_const(3)); });
    b.store(out, program_id(0), cast(b.get(n), ScalarType::f32));
  });
  REQUIRE(verify(guarded).empty());
  CHECK(print(guarded).find("if.instance lt(") != std::string::npos);
  CHECK(has_per_instance_control(guarded));
  std::vector<float> x = {1, 0, 0, -1, 0, 0, 0, 0, 0, 5, 0, 0}, result(4, -1.0f);
  interpret(guarded, {{x.data(), 12}, {result.data(), 4}}, {4});
  CHECK(result == std::vector<float>{2, 3, 3, 2});

  // The same condition on an ordinary if is refused.
  Kernel plain_if = row_kernel([](Builder& b, int x, int out) {
    b.if_else(binary(Op::Lt, constant(f32, 0), load(b.kernel(), x, index_const(0))), [&] { b.store(out, program_id(0), constant(f32, 1)); },
              [&] {});
  });
  CHECK(verify(plain_if).find("condition depends on program_id or data") != std::string::npos);
  // n, assigned a constant in each branch, varies between instances after the if: no loop may be bounded by it.
  Kernel bounded = row_kernel([](Builder& b, int x, int out) {
    int n = b.local("n", Type{ScalarType::i64, 1});
    b.assign(n, index_const(1));
    b.if_else_per_instance(binary(Op::Lt, constant(f32, 0), load(b.kernel(), x, index_const(0))), [&] { b.assign(n, index_const(2)); }, [&] {});
    b.for_range("j", index_const(0), b.get(n), 1, [&](ExprRef) { b.store(out, program_id(0), constant(f32, 1)); });
  });
  CHECK(verify(bounded).find("loop bounds depend on program_id or data") != std::string::npos);
}

TEST_CASE("printer output is stable") {
  Kernel k = row_kernel([](Builder& b, int x, int out) {
    int acc = b.local("acc", f32);
    b.assign(acc, constant(f32, 0));
    b.for_range("i", index_const(0), index_const(4), 1, [&](ExprRef i) {
      b.assign(acc, fma(load(b.kernel(), x, add(mul(program_id(0), index_const(4)), i)), constant(f32, 2), b.get(acc)));
    });
    b.store(out, program_id(0), b.get(acc));
  });
  k.description = "demo";
  CHECK(print(k) ==
        "kernel t  // demo\n"
        "  in  x: f32[rows*N]\n"
        "  out out: f32[rows]\n"
        "  grid rank 1\n"
        "{\n"
        "  %acc: f32 = 0:f32\n"
        "  for %i in [0, 4) step 1 {\n"
        "    %acc: f32 = fma(load.f32(x[add(mul(program_id(0), 4), %i)]), 2:f32, %acc)\n"
        "  }\n"
        "  store out[program_id(0)] = %acc\n"
        "}\n");
}

TEST_CASE("a refused launch: printed with the kernel, rejected by the interpreter before any instance runs") {
  Kernel k = row_kernel([](Builder& b, int x, int out) {
    b.refuse_launch(1, "one row takes an unmeasured path");
    b.refuse_launch(1, "a second reason for the same rows is dropped");
    b.store(out, program_id(0), load(b.kernel(), x, program_id(0)));
  });
  REQUIRE(verify(k).empty());
  CHECK(print(k).find("  grid rank 1\n  refuses rows == 1: one row takes an unmeasured path\n{\n") != std::string::npos);
  float x[2] = {1, 2}, r[2] = {-1, -1};
  CHECK_THROWS_WITH_AS(interpret(k, {{x, 1}, {r, 1}}, {1}), "rows=1: one row takes an unmeasured path", Error);
  CHECK(r[0] == -1.0f);  // nothing written
  interpret(k, {{x, 2}, {r, 2}}, {2});
  CHECK(r[1] == 2.0f);
}

TEST_CASE("refused launches by range and by multiple: printed, and rejected where the condition holds") {
  using When = Kernel::RefusedLaunch::When;
  Kernel k = row_kernel([](Builder& b, int x, int out) {
    b.refuse_launches(When::rows_at_least, 5, "five or more rows are unmeasured");
    b.refuse_launches(When::rows_not_multiple, 2, "rows come in pairs");
    b.store(out, program_id(0), load(b.kernel(), x, program_id(0)));
  });
  REQUIRE(verify(k).empty());
  CHECK(print(k).find("  refuses rows >= 5: five or more rows are unmeasured\n  refuses rows % 2 != 0: rows come in pairs\n") !=
        std::string::npos);
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, r[8] = {};
  CHECK_THROWS_WITH_AS(interpret(k, {{x, 3}, {r, 3}}, {3}), "rows=3: rows come in pairs", Error);
  CHECK_THROWS_WITH_AS(interpret(k, {{x, 6}, {r, 6}}, {6}), "rows=6: five or more rows are unmeasured", Error);
  interpret(k, {{x, 4}, {r, 4}}, {4});
  CHECK(r[3] == 4.0f);
  CHECK_THROWS_AS(Builder(k).refuse_launches(When::rows_not_multiple, 0, "no rows"), Error);
}

TEST_CASE("interpreter: fma rounds once, add and mul round each") {
  // (1 + 2^-23) * (1 - 2^-23) = 1 - 2^-46 exactly; rounded to f32 it is 1, so mul-then-add of -1
  // gives 0 while fma keeps -2^-46.
  const float a = 1.0f + 0x1p-23f, c = 1.0f - 0x1p-23f;
  auto run = [&](bool fused) {
    Kernel k = row_kernel([&](Builder& b, int, int out) {
      ExprRef A = constant(f32, a), C = constant(f32, c), m1 = constant(f32, -1);
      b.store(out, program_id(0), fused ? fma(A, C, m1) : add(mul(A, C), m1));
    });
    REQUIRE(verify(k).empty());
    float x = 0, r = 1;
    interpret(k, {{&x, 1}, {&r, 1}}, {1});
    return r;
  };
  CHECK(run(false) == 0.0f);
  CHECK(run(true) == -0x1p-46f);
}

TEST_CASE("interpreter: out-of-bounds loads are errors, not reads") {
  Kernel k = row_kernel([](Builder& b, int x, int out) { b.store(out, program_id(0), load(b.kernel(), x, index_const(3))); });
  float x[2] = {1, 2}, r = 0;
  CHECK_THROWS_WITH_AS(interpret(k, {{x, 2}, {&r, 1}}, {1}), "interpreter: load x[3..4) outside [0, 2)", Error);
}

TEST_CASE("interpreter: IEEE maximum propagates NaN and orders -0 below +0") {
  auto run = [](float p, float q) {
    Kernel k = row_kernel([&](Builder& b, int, int out) {
      b.store(out, program_id(0), binary(Op::Max, constant(f32, p), constant(f32, q)));
    });
    float x = 0, r = 0;
    interpret(k, {{&x, 1}, {&r, 1}}, {1});
    return r;
  };
  CHECK(std::isnan(run(1.0f, NAN)));
  CHECK(std::isnan(run(NAN, 1.0f)));
  CHECK(!std::signbit(run(-0.0f, 0.0f)));
  CHECK(!std::signbit(run(0.0f, -0.0f)));
  CHECK(run(-3.0f, 2.0f) == 2.0f);
}

TEST_CASE("f16 conversion is RNE: matches the compiler's _Float16 on every pattern and on random floats") {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_bits_to_f32(static_cast<uint16_t>(h));
    _Float16 ref;
    uint16_t hb = static_cast<uint16_t>(h);
    std::memcpy(&ref, &hb, 2);
    if (std::isnan(f)) {
      CHECK(std::isnan(static_cast<float>(ref)));
      continue;
    }
    REQUIRE(std::bit_cast<uint32_t>(f) == std::bit_cast<uint32_t>(static_cast<float>(ref)));
    REQUIRE(f32_to_f16_bits(f) == h);
  }
  uint32_t s = 12345;
  for (int i = 0; i < 2000000; ++i) {
    s = s * 1664525u + 1013904223u;
    float f = std::bit_cast<float>(s);
    if (std::isnan(f)) continue;
    _Float16 ref = static_cast<_Float16>(f);
    uint16_t rb;
    std::memcpy(&rb, &ref, 2);
    REQUIRE(f32_to_f16_bits(f) == rb);
  }
}

TEST_CASE("bf16 conversion is RNE with ties to even, overflow to inf, NaN stays NaN") {
  CHECK(f32_to_bf16_bits(1.0f) == 0x3f80);
  CHECK(f32_to_bf16_bits(std::bit_cast<float>(0x3f808000u)) == 0x3f80);  // tie, even stays
  CHECK(f32_to_bf16_bits(std::bit_cast<float>(0x3f818000u)) == 0x3f82);  // tie, odd rounds up
  CHECK(f32_to_bf16_bits(std::bit_cast<float>(0x3f808001u)) == 0x3f81);  // above the tie
  CHECK(f32_to_bf16_bits(3.4028235e38f) == 0x7f80);                      // rounds to +inf
  CHECK(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(NAN))));
  // Every bf16 value round-trips; and for random floats the result is one of the two
  // neighbours, the nearer one (ties: even), checked in double.
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = bf16_bits_to_f32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) REQUIRE(f32_to_bf16_bits(f) == h);
  }
  uint32_t s = 777;
  for (int i = 0; i < 1000000; ++i) {
    s = s * 1664525u + 1013904223u;
    float f = std::bit_cast<float>(s);
    if (!std::isfinite(f) || std::fabs(f) > 3.3e38f) continue;
    uint32_t lo = s & 0xffff0000u, hi = lo + 0x10000u;
    double dl = std::fabs(double(f) - double(std::bit_cast<float>(lo)));
    double dh = std::fabs(double(std::bit_cast<float>(hi)) - double(f));
    uint16_t want = static_cast<uint16_t>((dl < dh || (dl == dh && ((lo >> 16) & 1) == 0)) ? lo >> 16 : hi >> 16);
    REQUIRE(f32_to_bf16_bits(f) == want);
  }
}

TEST_CASE("lane folds have the documented shapes") {
  Kernel k;
  Builder b(k);
  std::vector<ExprRef> lanes;
  for (int i = 0; i < 8; ++i) {
    int l = b.local(fmt::format("a{}", i), f32);
    b.assign(l, constant(f32, i));
    lanes.push_back(b.get(l));
  }
  gen::Arith ar{ScalarType::f32, std::nullopt};
  CHECK(print(*gen::fold_lanes(lanes, LaneFold::Halving, ar), k) ==
        "add(add(add(%a0, %a4), add(%a2, %a6)), add(add(%a1, %a5), add(%a3, %a7)))");
  CHECK(print(*gen::fold_lanes(lanes, LaneFold::Adjacent, ar), k) ==
        "add(add(add(%a0, %a1), add(%a2, %a3)), add(add(%a4, %a5), add(%a6, %a7)))");
  CHECK(print(*gen::fold_lanes(lanes, LaneFold::Sequential, ar), k) ==
        "add(add(add(add(add(add(add(%a0, %a1), %a2), %a3), %a4), %a5), %a6), %a7)");
  gen::Arith rounding{ScalarType::f32, ScalarType::bf16};
  CHECK(print(*rounding.add(lanes[0], lanes[1]), k) == "cast.f32(cast.bf16(add(%a0, %a1)))");
}

// Found by tests/fuzz/fuzz_ir.cpp (its corpus/ir/regression-* inputs): the verifier printed the
// node it rejected with a printer that assumed a well-formed node, and checked uniformity before
// it checked operands, so malformed kernels crashed it or made it throw; and it accepted
// statements with missing fields, which the interpreter then dereferenced.
TEST_CASE("verifier: malformed nodes and statements get a message; it never crashes or throws") {
  auto verdict = [](const Kernel& k) {
    std::string err;
    CHECK_NOTHROW(err = verify(k));
    return err;
  };
  Kernel null_operand = row_kernel([](Builder& b, int, int out) {
    auto e = std::make_shared<Expr>(*add(constant(f32, 1), constant(f32, 2)));
    e->args[1] = nullptr;
    b.store(out, program_id(0), e);
  });
  CHECK(verdict(null_operand) == "kernel t: node `add(1:f32, ?null)`: null operand");

  Kernel unknown_local = row_kernel([](Builder& b, int, int out) {
    auto v = std::make_shared<Expr>();
    v->op = Op::Var;
    v->type = f32;
    v->index = -1000;
    b.store(out, program_id(0), v);
  });
  CHECK(verdict(unknown_local) == "kernel t: node `%?local-1000`: unknown local");

  Kernel null_in_uniformity = row_kernel([](Builder& b, int, int out) {
    int l = b.local("n", i64);
    auto e = std::make_shared<Expr>(*add(index_const(1), index_const(2)));
    e->args[0] = nullptr;
    b.assign(l, e);  // mark_nonuniform looks at this before the operands are checked
    b.store(out, program_id(0), constant(f32, 0));
  });
  CHECK(verdict(null_in_uniformity) == "kernel t: node `add(?null, 2)`: null operand");

  Kernel loop_without_begin = row_kernel([](Builder& b, int, int out) {
    b.for_range("i", index_const(0), index_const(2), 1, [&](ExprRef) { b.store(out, program_id(0), constant(f32, 0)); });
    b.kernel().body.back().begin = nullptr;
  });
  CHECK(verdict(loop_without_begin) == "kernel t: statement `for %i in [?null, 2) step 1 {`: loop needs a begin and an end");

  Kernel if_without_condition = row_kernel([](Builder& b, int, int out) {
    b.if_(constant(Type{ScalarType::boolean, 1}, 1), [&] { b.store(out, program_id(0), constant(f32, 0)); });
    b.kernel().body.back().value = nullptr;
  });
  CHECK(verdict(if_without_condition) == "kernel t: statement `if ?null {`: if has no condition");

  Kernel store_to_unknown = row_kernel([](Builder& b, int, int) { b.store(7, program_id(0), constant(f32, 0)); });
  CHECK(verdict(store_to_unknown) == "kernel t: statement `store ?buffer7[program_id(0)] = 0:f32`: unknown buffer");

  Kernel bool_buffer = row_kernel([](Builder& b, int, int) { b.buffer("flags", ScalarType::boolean, true, Extent::rows); });
  CHECK(verdict(bool_buffer) == "kernel t: buffer flags has element type bool; buffers hold numbers");
}

TEST_CASE("interpreter: i64 add, sub and mul wrap around; div and rem outside x >= 0, y > 0 are errors") {
  auto run = [](Op op, int64_t x, int64_t y) {
    Kernel k;
    k.name = std::string("t");
    Builder b(k);
    int out = b.buffer("out", ScalarType::i64, true, Extent::rows);
    b.store(out, program_id(0), binary(op, index_const(x), index_const(y)));
    REQUIRE(verify(k).empty());
    int64_t r = 0;
    interpret(k, {{&r, 1}}, {1});
    return r;
  };
  CHECK(run(Op::Add, INT64_MAX, 1) == INT64_MIN);
  CHECK(run(Op::Sub, INT64_MIN, 1) == INT64_MAX);
  CHECK(run(Op::Mul, INT64_MAX, -4) == 4);  // -4 * (2^63 - 1) = 4 - 2^65, which is 4 modulo 2^64
  CHECK(run(Op::Div, 7, 2) == 3);
  CHECK(run(Op::Rem, 7, 2) == 1);
  CHECK_THROWS_WITH_AS(run(Op::Div, INT64_MIN, -1), "interpreter: i64 div(-9223372036854775808, -1) needs a dividend >= 0 and a divisor > 0", Error);
  CHECK_THROWS_WITH_AS(run(Op::Rem, 5, 0), "interpreter: i64 rem(5, 0) needs a dividend >= 0 and a divisor > 0", Error);
}

// The i64 bit operations glibc's expf needs: shifts by constants in [0, 63], and, f64 <-> i64
// bitcasts, i32 -> i64 sign extension, and a table read per lane.
TEST_CASE("i64 bit operations: interpreter semantics and verifier limits") {
  auto run = [](auto&& value) {
    Kernel k;
    k.name = std::string("t");
    Builder b(k);
    int out = b.buffer("out", ScalarType::i64, true, Extent::rows_by_cols);
    ExprRef v = value(b);
    b.store(out, index_const(0), v);
    const std::string err = verify(k);
    if (!err.empty()) return std::vector<int64_t>{};
    std::vector<int64_t> r(static_cast<size_t>(v->type.lanes), -1);
    interpret(k, {{r.data(), static_cast<int64_t>(r.size())}}, {1});
    return r;
  };
  const ExprRef minus_one = index_const(-1);
  CHECK(run([&](Builder&) { return binary(Op::Shl, index_const(3), index_const(62)); }) == std::vector<int64_t>{INT64_MIN + (int64_t(1) << 62)});
  CHECK(run([&](Builder&) { return binary(Op::Shr, index_const(INT64_MIN), index_const(63)); }) == std::vector<int64_t>{-1});
  CHECK(run([&](Builder&) { return binary(Op::BitAnd, minus_one, index_const(0x1f)); }) == std::vector<int64_t>{31});
  CHECK(run([&](Builder&) { return bitcast(constant(Type{ScalarType::f64, 1}, -2.0), ScalarType::i64); }) ==
        std::vector<int64_t>{static_cast<int64_t>(0xc000000000000000ull)});
  CHECK(run([&](Builder&) {
          return bitcast(bitcast(index_const(0x3ff8000000000000), ScalarType::f64), ScalarType::i64);  // 1.5 and back
        }) == std::vector<int64_t>{0x3ff8000000000000});
  CHECK(run([&](Builder&) { return cast(constant(Type{ScalarType::i32, 1}, -7), ScalarType::i64); }) == std::vector<int64_t>{-7});
  CHECK_THROWS_WITH_AS(run([&](Builder& b) { return table(b.table({10, 20, 30}), iota(4)); }), "interpreter: table0[3] outside [0, 3)", Error);
  CHECK(run([&](Builder& b) {
          const int t = b.table({10, 20, 30, 40});
          return table(t, sub(broadcast(index_const(3), 4), iota(4)));
        }) == std::vector<int64_t>{40, 30, 20, 10});
  // Shift counts are constants within the width.
  CHECK(run([&](Builder&) { return binary(Op::Shl, index_const(1), index_const(64)); }).empty());
  CHECK(run([&](Builder&) { return binary(Op::Shl, constant(Type{ScalarType::i32, 1}, 1), constant(Type{ScalarType::i32, 1}, 32)); }).empty());
  // f32 <-> i64 is not a bitcast.
  CHECK(run([&](Builder&) { return bitcast(constant(Type{ScalarType::f32, 1}, 1.0), ScalarType::i64); }).empty());
}

TEST_CASE("interpreter: loops and bounds at the top of the i64 range") {
  // for i in [begin, end) step s: one store per trip into its own element; the loop must end
  // where i + s would pass INT64_MAX, never wrap around.
  auto trips = [](int64_t begin, int64_t end, int64_t step) {
    Kernel k;
    k.name = std::string("t");
    Builder b(k);
    int out = b.buffer("out", ScalarType::i64, true, Extent::rows);
    int n = b.local("n", i64);
    b.assign(n, index_const(0));
    b.for_range("i", index_const(begin), index_const(end), step, [&](ExprRef) { b.assign(n, add(b.get(n), index_const(1))); });
    b.store(out, program_id(0), b.get(n));
    REQUIRE(verify(k).empty());
    int64_t r = -1;
    interpret(k, {{&r, 1}}, {1});
    return r;
  };
  CHECK(trips(INT64_MAX - 3, INT64_MAX, 4) == 1);
  CHECK(trips(INT64_MAX - 5, INT64_MAX, 2) == 3);  // MAX-5, MAX-3, MAX-1
  CHECK(trips(INT64_MIN, INT64_MIN + 10, 3) == 4);
  CHECK(trips(5, 5, 1) == 0);
  CHECK(trips(-3, 4, 7) == 1);

  // A load whose last lane lies past INT64_MAX is out of bounds, reported without overflow.
  Kernel k = row_kernel([](Builder& b, int x, int out) {
    b.store(out, program_id(0), extract(load(b.kernel(), x, index_const(INT64_MAX - 1), 4), 0));
  });
  REQUIRE(verify(k).empty());
  float x[2] = {1, 2}, r = 0;
  CHECK_THROWS_WITH_AS(interpret(k, {{x, 2}, {&r, 1}}, {1}), "interpreter: load x[9223372036854775806..9223372036854775806+4) outside [0, 2)", Error);

  // The loop variable of a loop that ran no trip is unassigned after it, as a local assigned only
  // in the body would be.
  Kernel empty = row_kernel([](Builder& b, int, int out) {
    int i = -1;
    b.for_range("i", index_const(3), index_const(3), 1, [&](ExprRef v) { i = static_cast<int>(v->index); });
    b.store(out, program_id(0), cast(b.get(i), ScalarType::f32));
  });
  REQUIRE(verify(empty).empty());
  CHECK_THROWS_WITH_AS(interpret(empty, {{x, 2}, {&r, 1}}, {1}), "interpreter: local %i read before assignment", Error);
}

// Teams: the threads of a Team statement run in thread order in the interpreter; shuffles read
// the values of the statement's start, CUDA's out-of-warp rule included; team memory passes
// values between Team statements and a same-statement conflict is reported as a race.
namespace {
// A team of `threads`: thread t holds v = t + 1 (f32); then `exchange` runs; thread 0's v and,
// for each thread, v go to out[t] (a rows*N output of N = threads).
template <class F>
Kernel team_kernel(int threads, F&& exchange) {
  Kernel k;
  k.name = std::string("team");
  k.team = threads;
  Builder b(k);
  const int out = b.buffer("out", ScalarType::f32, true, Extent::rows_by_cols);
  const int v = b.local("v", f32);
  b.team([&](ExprRef t) { b.assign(v, add(cast(t, ScalarType::f32), constant(f32, 1.0))); });
  exchange(b, v);
  b.team([&](ExprRef t) { b.store(out, add(mul(program_id(0), index_const(threads)), t), b.get(v)); });
  return k;
}
std::vector<float> run_team(const Kernel& k, int threads) {
  std::vector<float> out(static_cast<size_t>(threads), -1.0f);
  interpret(k, {BufferArg{out.data(), threads}}, {1});
  return out;
}
}  // namespace

TEST_CASE("interpreter: team shuffles read the statement's start, and out-of-warp sources read their own value") {
  Kernel down = team_kernel(64, [](Builder& b, int v) {
    b.team([&](ExprRef) { b.assign(v, add(b.get(v), shuffle_down(b.kernel(), v, 16))); });
  });
  REQUIRE(verify(down).empty());
  std::vector<float> got = run_team(down, 64);
  for (int t = 0; t < 64; ++t) {
    const int src = (t % 32) + 16 < 32 ? t + 16 : t;  // within the warp, else itself
    CHECK(got[size_t(t)] == float(t + 1) + float(src + 1));
  }
  // A butterfly: every thread of a warp ends with the warp's sum (values from the start of each step).
  Kernel bfly = team_kernel(64, [](Builder& b, int v) {
    for (int m = 16; m >= 1; m /= 2) b.team([&](ExprRef) { b.assign(v, add(b.get(v), shuffle_xor(b.kernel(), v, m))); });
  });
  REQUIRE(verify(bfly).empty());
  got = run_team(bfly, 64);
  for (int t = 0; t < 64; ++t) CHECK(got[size_t(t)] == (t < 32 ? 528.0f : 1552.0f));  // 1+..+32, 33+..+64
}

TEST_CASE("verifier: team rules") {
  // A shuffle of a local assigned earlier in the same Team statement would read another value on a GPU.
  Kernel late = team_kernel(32, [](Builder& b, int v) {
    b.team([&](ExprRef) {
      b.assign(v, add(b.get(v), b.get(v)));
      b.assign(v, shuffle_down(b.kernel(), v, 1));
    });
  });
  CHECK(verify(late).find("assigned earlier in this team statement") != std::string::npos);
  // Shuffles inside thread-dependent control flow: not every thread of the warp would run them.
  Kernel nested = team_kernel(32, [](Builder& b, int v) {
    b.team([&](ExprRef t) { b.if_(binary(Op::Lt, t, index_const(4)), [&] { b.assign(v, shuffle_down(b.kernel(), v, 1)); }); });
  });
  CHECK(verify(nested).find("top level of a team statement") != std::string::npos);
  Kernel partial_warp = team_kernel(48, [](Builder& b, int v) { b.team([&](ExprRef) { b.assign(v, shuffle_xor(b.kernel(), v, 1)); }); });
  CHECK(verify(partial_warp).find("multiple of 32") != std::string::npos);
  // Per-thread locals stay inside team statements; stores too.
  Kernel outside = team_kernel(32, [](Builder& b, int v) { b.let("w", b.get(v)); });
  CHECK(verify(outside).find("per-thread local read outside a team statement") != std::string::npos);
  Kernel no_team = row_kernel([](Builder& b, int, int out) { b.team([&](ExprRef t) { b.store(out, t, constant(f32, 0)); }); });
  CHECK(verify(no_team).find("team of 1 thread") != std::string::npos);
  // Loop bounds may depend on thread_id inside a team statement, never on data.
  Kernel strided = team_kernel(32, [](Builder& b, int v) {
    b.team([&](ExprRef t) { b.for_range("i", t, index_const(100), 32, [&](ExprRef) { b.assign(v, add(b.get(v), b.get(v))); }); });
  });
  CHECK(verify(strided).empty());
  // A per-instance loop sits outside team statements, where every thread of the instance agrees.
  Kernel per_thread_trips = team_kernel(32, [](Builder& b, int v) {
    b.team([&](ExprRef) { b.for_per_instance("i", index_const(0), program_id(0), 1, [&](ExprRef) { b.assign(v, add(b.get(v), b.get(v))); }); });
  });
  CHECK(verify(per_thread_trips).find("a per-instance loop inside a team statement") != std::string::npos);
  // So does a per-instance if: inside a team statement its threads could disagree on the data it tests.
  Kernel per_thread_branch = team_kernel(32, [](Builder& b, int v) {
    b.team([&](ExprRef) {
      b.if_else_per_instance(binary(Op::Lt, b.get(v), constant(f32, 3)), [&] { b.assign(v, add(b.get(v), b.get(v))); }, [&] {});
    });
  });
  CHECK(verify(per_thread_branch).find("a per-instance if inside a team statement") != std::string::npos);
}

TEST_CASE("interpreter: team memory carries values between team statements; a same-statement conflict is a race") {
  // Thread t stores its v at shared[t] and reads shared[t + offset] (mod 32; at most 31 when the
  // read comes first): in two statements, or in one, storing first or reading first.
  enum class Layout { two_statements, store_then_read, read_then_store };
  auto exchange = [](Layout layout, int offset) {
    return team_kernel(32, [layout, offset](Builder& b, int v) {
      const int shared = b.buffer("shared", ScalarType::f32, true, Extent::scratch, 32);
      auto write = [&](ExprRef t) { b.store(shared, t, b.get(v)); };
      auto read = [&](ExprRef t) {
        ExprRef at = binary(Op::Rem, add(t, index_const(offset)), index_const(32));
        if (layout == Layout::read_then_store) at = binary(Op::Min, add(t, index_const(offset)), index_const(31));
        b.assign(v, load(b.kernel(), shared, at));
      };
      if (layout == Layout::two_statements) {
        b.team(write);
        b.team(read);
      } else {
        b.team([&](ExprRef t) {
          if (layout == Layout::store_then_read) write(t);
          read(t);
          if (layout == Layout::read_then_store) write(t);
        });
      }
    });
  };
  Kernel ok = exchange(Layout::two_statements, 1);
  REQUIRE(verify(ok).empty());
  const std::vector<float> got = run_team(ok, 32);
  for (int t = 0; t < 32; ++t) CHECK(got[size_t(t)] == float((t + 1) % 32 + 1));
  // Read after another thread's store: thread 1 reads shared[0], which thread 0 stored.
  Kernel read_after_write = exchange(Layout::store_then_read, 31);
  REQUIRE(verify(read_after_write).empty());
  CHECK_THROWS_WITH_AS(run_team(read_after_write, 32),
                       doctest::Contains("race on team memory shared[0]: thread 1 reads it in the team statement where thread 0 stored it"),
                       Error);
  // Store after another thread's read: thread 1 stores shared[1], which thread 0 read. In thread
  // order every read sees the old value, and no thread reads another's store; on a GPU a read
  // may see either value.
  Kernel write_after_read = exchange(Layout::read_then_store, 1);
  REQUIRE(verify(write_after_read).empty());
  CHECK_THROWS_WITH_AS(run_team(write_after_read, 32),
                       doctest::Contains("race on team memory shared[1]: thread 1 stores it in the team statement where thread 0 read it"),
                       Error);
  // Many readers of one element, then a store by the last of them: still a race.
  Kernel many_readers = team_kernel(32, [](Builder& b, int v) {
    const int shared = b.buffer("shared", ScalarType::f32, true, Extent::scratch, 1);
    b.team([&](ExprRef t) { b.if_(binary(Op::Eq, t, index_const(0)), [&] { b.store(shared, index_const(0), b.get(v)); }); });
    b.team([&](ExprRef t) {
      b.assign(v, load(b.kernel(), shared, index_const(0)));
      b.if_(binary(Op::Eq, t, index_const(31)), [&] { b.store(shared, index_const(0), b.get(v)); });
    });
  });
  REQUIRE(verify(many_readers).empty());
  CHECK_THROWS_WITH_AS(run_team(many_readers, 32),
                       doctest::Contains("race on team memory shared[0]: thread 31 stores it in the team statement where other threads read it"),
                       Error);
  // A thread that reads and then stores its own element is no race.
  Kernel own = team_kernel(32, [](Builder& b, int v) {
    const int shared = b.buffer("shared", ScalarType::f32, true, Extent::scratch, 32);
    b.team([&](ExprRef t) { b.store(shared, t, b.get(v)); });
    b.team([&](ExprRef t) {
      b.assign(v, add(load(b.kernel(), shared, t), b.get(v)));
      b.store(shared, t, b.get(v));
    });
  });
  REQUIRE(verify(own).empty());
  const std::vector<float> doubled = run_team(own, 32);
  for (int t = 0; t < 32; ++t) CHECK(doubled[size_t(t)] == float(2 * (t + 1)));
}

TEST_CASE("interpreter: CUDA's device functions are refused, not approximated") {
  Kernel k = row_kernel([](Builder& b, int x, int out) {
    b.store(out, program_id(0), call(MathFn::device_rsqrtf, load(b.kernel(), x, index_const(0))));
  });
  REQUIRE(verify(k).empty());
  float x = 4.0f, out = 0.0f;
  CHECK_THROWS_WITH_AS(interpret(k, {BufferArg{&x, 1}, BufferArg{&out, 1}}, {1}), doctest::Contains("device-only"), Error);
}

// On the CUDA targets the norm ops run a row on one warp (gen/blocks/warp.hpp): a lane-tree sum's
// partial sums, or the lane Welford cascade's lanes, one per thread, the folds by shuffles. The
// interpreter runs both layouts; they must give the same bits, on every shape class (fewer
// terms than lanes, fewer vectors than accumulators, tails, one chunk and many stack levels,
// rows of NaN and inf) and storage type.
// The CUDA targets build the norm ops differently from the CPU: on one warp (a team of 32), or
// on one thread with a two-pass order's passes as one loop (gen/blocks/reductions.cpp). Either way the
// kernel must compute the CPU kernel's bits.
TEST_CASE("gen: the norm ops on one warp, or with their passes as a loop, give the one-thread kernel's bits") {
  struct Case {
    const char* order;
    int team;  // of the CUDA kernel
  };
  const Case orders[] = {{"fast", 32}, {"two-pass-lanes(lanes=4,accumulators=3)", 32}, {"two-pass-lanes(lanes=16,accumulators=2)", 32},
                         {"two-pass-lanes(lanes=32,accumulators=1,acc=f64)", 32}, {"two-pass-lanes(lanes=1,accumulators=5)", 32},
                         {"one-pass", 32}, {"onnxruntime-cpu", 32}, {"torch1.13-cpu-default", 32}, {"torch1.13-cpu-avx2", 32},
                         {"torch1.13-cpu-avx512", 32}, {"torch2.15-cpu-default", 32}, {"torch2.15-cpu-avx2", 32},
                         {"lane-welford(lanes=32,acc=f64,fma=all)", 32},
                         {"lane-welford(lanes=4,chunk=3,fma=update)", 32},
                         // one thread, the passes as a loop
                         {"two-pass-pairwise", 1}, {"two-pass-pairwise(block=16,lanes=4)", 1}, {"numpy-two-pass", 1},
                         {"two-pass-lanes(lanes=8,accumulators=8,acc=f64)", 1},
                         {"two-pass-lanes(lanes=8,accumulators=8,outer=64)", 1}};
  const int64_t widths[] = {1, 2, 5, 8, 9, 31, 32, 33, 47, 100, 257, 1000, 4099, 16384};
  uint64_t state = 7;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return float(int64_t(state >> 40) - (int64_t(1) << 23)) / float(1 << 23);  // [-1, 1)
  };
  int compared = 0;
  for (OpKind op : {OpKind::layer_norm, OpKind::rms_norm, OpKind::var_mean})
    for (const auto& [order, team] : orders)
      for (ScalarType dtype : {ScalarType::f32, ScalarType::bf16, ScalarType::f16})
        for (int64_t n : widths) {
          Request r;
          r.op = op;
          r.cols = n;
          r.order = order;
          r.x_dtype = dtype;
          r.has_weight = op != OpKind::var_mean;
          r.has_bias = op == OpKind::layer_norm;
          r.target = Target::cpu;
          ir::Order resolved;
          try {
            resolved = gen::resolve(r);
          } catch (const Error&) {
            continue;  // the order does not take this op, dtype or shape
          }
          if (std::string_view(order) == "onnxruntime-cpu" && n <= 7) continue;  // its N <= 7 kernel is a Welford
          // torch2.15's var_mean (a sequential Welford in f64) and rms_norm (PyTorch's sum cascade)
          // run on one thread on every target; its layer_norm is the lane cascade on a warp
          if (std::string_view(order).starts_with("torch2.15") && op != OpKind::layer_norm) continue;
          INFO(name(op), " ", std::string(order), " ", name(dtype), " N=", n);
          const Kernel one_thread = gen::build(r, resolved);
          r.target = Target::cuda_emu;
          const Kernel cuda = gen::build(r, gen::resolve(r));
          REQUIRE(verify(cuda).empty());
          CHECK(one_thread.team == 1);
          REQUIRE(cuda.team == team);

          // Three rows: values around 10, a row holding a NaN and an inf, values around -1e4.
          const int64_t rows = 3;
          std::vector<std::vector<uint8_t>> inputs;
          std::vector<int64_t> counts;
          for (const Buffer& buf : one_thread.buffers) {
            if (!is_argument(buf)) continue;
            const size_t elem = size_t(size_bytes(buf.elem));
            const int64_t count = buf.extent == Extent::rows_by_cols ? rows * n : buf.extent == Extent::cols ? n : rows;
            std::vector<uint8_t> data(size_t(count) * elem);
            if (!buf.output)
              for (int64_t i = 0; i < count; ++i) {
                const int64_t row = buf.extent == Extent::rows_by_cols ? i / n : 0, col = i % n;
                float v = buf.extent == Extent::cols ? next() : row == 2 ? -1e4f + 50 * next() : 10 + 3 * next();
                if (buf.extent == Extent::rows_by_cols && row == 1 && col == n / 2) v = n % 2 ? std::nanf("") : INFINITY;
                uint8_t* to = &data[size_t(i) * elem];
                if (buf.elem == ScalarType::f32) std::memcpy(to, &v, 4);
                const uint16_t h = buf.elem == ScalarType::bf16 ? f32_to_bf16_bits(v) : f32_to_f16_bits(v);
                if (buf.elem != ScalarType::f32) std::memcpy(to, &h, 2);
              }
            inputs.push_back(std::move(data));
            counts.push_back(count);
          }
          auto run = [&](const Kernel& k) {
            std::vector<std::vector<uint8_t>> data = inputs;
            std::vector<BufferArg> args;
            for (size_t i = 0; i < data.size(); ++i) args.push_back({data[i].data(), counts[i]});
            interpret(k, args, {rows});
            return data;
          };
          CHECK(run(one_thread) == run(cuda));
          ++compared;
        }
  CHECK(compared > 400);
  MESSAGE(compared, " kernels compared");

  // Outside the warp layout the CUDA targets keep one thread: more partial sums than a warp has
  // threads, outer chunks, pairwise sums, a sequential Welford.
  for (const char* order : {"two-pass-lanes(lanes=8,accumulators=8)", "two-pass-lanes(outer=64)", "two-pass-pairwise",
                            "sequential-welford"}) {
    Request r;
    r.op = OpKind::layer_norm;
    r.cols = 1000;
    r.order = order;
    r.target = Target::cuda;
    CHECK_MESSAGE(gen::build(r, gen::resolve(r)).team == 1, order);
  }
}

namespace {
// A scalar model of PyTorch's CUDA layer_norm kernels, written from their source
// (aten/src/ATen/native/cuda/layer_norm_kernel.cu) and independent of gen/ops/team.cpp: the IR of
// torch-cuda-tree must compute exactly this. All arithmetic is f32; fma is std::fma.
struct Stream {
  float n = 0, mean = 0, m2 = 0;
};
// The vectorized kernel's cuWelfordCombine(B = own, A = other).
Stream combine_vectorized(const Stream& own, const Stream& other) {
  const Stream &B = own, &A = other;
  const float delta = B.mean - A.mean, count = A.n + B.n;
  if (!(count > 0)) return {count, 0, 0};
  const float coef = 1.0f / count, nA = A.n * coef, nB = B.n * coef;
  return {count, std::fma(A.mean, nA, B.mean * nB), std::fma((delta * delta) * A.n, nB, A.m2 + B.m2)};
}
// The two-kernel path's WelfordOps::combine(a = own, b = other), contracted as nvcc does.
Stream combine_generic(const Stream& a, const Stream& b) {
  if (a.n == 0) return b;
  if (b.n == 0) return a;
  const float delta = b.mean - a.mean, count = a.n + b.n, c = b.n / count;
  return {count, std::fma(delta, c, a.mean), std::fma((delta * delta) * a.n, c, a.m2 + b.m2)};
}
// Shuffle-down steps 16..1 over every warp of `s` at once: each step reads the states as it
// began, and a source past the warp's end is the thread's own state.
template <class Combine>
void shuffle_down_tree(std::vector<Stream>& s, Combine combine) {
  for (size_t offset = 16; offset >= 1; offset /= 2) {
    const std::vector<Stream> before = s;
    for (size_t t = 0; t < s.size(); ++t) s[t] = combine(before[t], t % 32 + offset < 32 ? before[t + offset] : before[t]);
  }
}
struct RowStats {
  float mean, var;
};
RowStats vectorized_stats(const std::vector<float>& x) {
  const size_t T = 128, N = x.size();
  std::vector<Stream> s(T);
  for (size_t t = 0; t < T; ++t)
    for (size_t v = t; v < N / 4; v += T)
      for (size_t l = 0; l < 4; ++l) {
        const float xl = x[4 * v + l], d = xl - s[t].mean;
        s[t].n += 1;
        s[t].mean = std::fma(d, 1.0f / s[t].n, s[t].mean);
        s[t].m2 = std::fma(d, xl - s[t].mean, s[t].m2);
      }
  shuffle_down_tree(s, combine_vectorized);
  for (size_t offset = 2; offset >= 1; offset /= 2)  // warps [offset, 2 offset) into warps [0, offset)
    for (size_t w = 0; w < offset; ++w) s[32 * w] = combine_vectorized(s[32 * w], s[32 * (w + offset)]);
  return {s[0].mean, s[0].m2 / float(N)};
}
RowStats two_kernel_stats(const std::vector<float>& x) {
  const size_t T = 512, N = x.size();
  std::vector<Stream> s(T);
  for (size_t t = 0; t < T; ++t)
    for (size_t j = t; j < N; j += T) {
      const float d = x[j] - s[t].mean;
      s[t].n += 1;
      s[t].mean = s[t].mean + d / s[t].n;
      s[t].m2 = std::fma(d, x[j] - s[t].mean, s[t].m2);
    }
  shuffle_down_tree(s, combine_generic);
  std::vector<Stream> warp0(32);  // lane l: warp l's result; lanes past the 16 warps empty
  for (size_t w = 0; w < T / 32; ++w) warp0[w] = s[32 * w];
  shuffle_down_tree(warp0, combine_generic);
  return {warp0[0].mean, warp0[0].m2 / warp0[0].n};
}
}  // namespace

TEST_CASE("gen: torch-cuda-tree is PyTorch's vectorized CUDA layer_norm for N % 4 == 0 and its two-kernel path otherwise") {
  uint64_t state = 11;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return float(int64_t(state >> 40) - (int64_t(1) << 23)) / float(1 << 23);  // [-1, 1)
  };
  auto to_storage = [](ScalarType t, float v) {
    return t == ScalarType::f32 ? v : t == ScalarType::bf16 ? bf16_bits_to_f32(f32_to_bf16_bits(v)) : f16_bits_to_f32(f32_to_f16_bits(v));
  };
  auto bits_of = [](ScalarType t, float v) -> uint32_t {
    return t == ScalarType::f32 ? f32_bits(v) : t == ScalarType::bf16 ? f32_to_bf16_bits(v) : f32_to_f16_bits(v);
  };
  auto read = [](ScalarType t, const uint8_t* p) -> uint32_t {
    if (t == ScalarType::f32) {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    uint16_t h;
    std::memcpy(&h, p, 2);
    return h;
  };
  int compared = 0, two_kernel = 0;
  for (int64_t n : {1, 3, 4, 6, 8, 31, 100, 128, 511, 512, 513, 516, 1000, 1001, 2052, 4096, 4097})
    for (ScalarType dtype : {ScalarType::f32, ScalarType::bf16, ScalarType::f16})
      for (int affine = 0; affine < 4; ++affine) {
        Request r;
        r.op = OpKind::layer_norm;
        r.cols = n;
        r.order = "torch-cuda-tree";
        r.x_dtype = dtype;
        r.has_weight = affine & 1;
        r.has_bias = affine & 2;
        r.target = Target::cuda_emu;
        const ir::Order order = gen::resolve(r);
        const bool vectorized = n % 4 == 0;
        CHECK((order.moments.kind == MomentsOrder::Kind::BlockWelford) == vectorized);
        const Kernel k = gen::build(r, order);
        REQUIRE(verify(k).empty());
        CHECK(k.team == (vectorized ? 128 : 512));
        INFO("N=", n, " ", name(dtype), " weight ", r.has_weight, " bias ", r.has_bias);

        // Rows: around 10, around -1e4 with spread 50, tiny values around 1e-3, and an inf in one.
        const int64_t rows = 4;
        std::vector<float> x(static_cast<size_t>(rows * n)), w(static_cast<size_t>(n)), bias(static_cast<size_t>(n));
        for (int64_t i = 0; i < rows * n; ++i) {
          const int64_t row = i / n;
          const float v = row == 0 ? 10 + 3 * next() : row == 1 ? -1e4f + 50 * next() : row == 2 ? 1e-3f * next() : 2 * next();
          x[size_t(i)] = to_storage(dtype, row == 3 && i % n == n / 2 ? INFINITY : v);
        }
        for (int64_t j = 0; j < n; ++j) {
          w[size_t(j)] = to_storage(dtype, 1 + 0.5f * next());
          bias[size_t(j)] = to_storage(dtype, next());
        }
        std::vector<std::vector<uint8_t>> data;
        std::vector<BufferArg> args;
        for (const Buffer& buf : k.buffers) {
          if (!is_argument(buf)) continue;
          const int64_t count = buf.extent == Extent::rows_by_cols ? rows * n : buf.extent == Extent::cols ? n : rows;
          const std::vector<float>& src = buf.name == "x" ? x : buf.name == "weight" ? w : bias;
          std::vector<uint8_t> bytes(size_t(count * size_bytes(buf.elem)));
          for (int64_t i = 0; !buf.output && i < count; ++i) {
            const uint32_t v = bits_of(buf.elem, src[size_t(i)]);
            std::memcpy(&bytes[size_t(i * size_bytes(buf.elem))], &v, size_t(size_bytes(buf.elem)));
          }
          data.push_back(std::move(bytes));
          args.push_back({nullptr, count});
        }
        for (size_t i = 0; i < data.size(); ++i) args[i].data = data[i].data();
        interpret(k, args, {rows});
        const size_t y_arg = 1 + r.has_weight + r.has_bias, es = size_t(size_bytes(dtype));

        int mismatches = 0;
        for (int64_t row = 0; row < rows; ++row) {
          const std::vector<float> xr(x.begin() + row * n, x.begin() + (row + 1) * n);
          const RowStats st = vectorized ? vectorized_stats(xr) : two_kernel_stats(xr);
          const float rstd = 1.0f / std::sqrt(st.var + float(r.eps));
          mismatches += read(dtype, &data[y_arg + 1][size_t(row) * es]) != bits_of(dtype, st.mean);
          mismatches += read(dtype, &data[y_arg + 2][size_t(row) * es]) != bits_of(dtype, rstd);
          for (int64_t j = 0; j < n; ++j) {
            const float centered = xr[size_t(j)] - st.mean;
            const float g = w[size_t(j)], b = bias[size_t(j)];
            float y;
            if (vectorized) {  // gamma*(rstd*(x - mean)) + beta, contracted; missing ones left out
              const float t = rstd * centered;
              y = r.has_weight && r.has_bias ? std::fma(g, t, b) : r.has_weight ? g * t : r.has_bias ? std::fma(rstd, centered, b) : t;
            } else {  // ((x - mean)*rstd)*gamma + beta, contracted, with gamma = 1 and beta = 0 when missing
              y = std::fma(centered * rstd, r.has_weight ? g : 1.0f, r.has_bias ? b : 0.0f);
            }
            mismatches += read(dtype, &data[y_arg][size_t(row * n + j) * es]) != bits_of(dtype, y);
          }
        }
        CHECK(mismatches == 0);
        ++compared;
        two_kernel += !vectorized;
      }
  CHECK(two_kernel == 96);
  MESSAGE(compared, " kernels against the model, ", two_kernel, " of them the two-kernel path");
}
