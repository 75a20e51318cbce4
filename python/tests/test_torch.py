#!/usr/bin/env python3
"""ordo.torch against PyTorch 2.15, bit for bit.

Run with the torch 2.15 venv's python (a different or missing torch fails, never skips):
    PYTHONPATH=build/python "$(scripts/torch2-venv --python)" python/tests/test_torch.py

  - `import ordo` imports no torch; ordo.torch does.
  - The custom ops equal eager torch for torch2.15-cpu (f32, bf16, f16, mixed dtypes,
    multi-dim normalized_shape, softmax dtype=, SDPA causal and scaled), and
    torch.compile(fullgraph=True) keeps them in one graph.
  - pinned: every routed spelling (F.*, torch.*, Tensor.*, nn modules) reaches ordo (the
    operators that reach the dispatcher; the bits of ordo's `fast` order) and equals eager with
    torch2.15-cpu, in eager mode and compiled inside the block, where the graph holds ordo's
    ops and none of torch's.
  - Non-contiguous inputs and mixed dtypes give eager's bits; so does a single long rms_norm
    row on 2 threads (the order names torch's thread count).
  - Under dynamic shapes (automatic, or dynamic=True) the sizes ordo compiles for are specialized;
    other sizes stay symbolic.
  - Calls ordo cannot run: torch's result and one OrdoFallbackWarning per block and reason,
    naming it; strict=True raises ValueError, in eager and compiled code.
  - One compiled function in blocks of different orders and outside runs the graph of each.
  - Backward raises RuntimeError naming the op, in eager and compiled code; forward works.
  - Grouped-query SDPA (enable_gqa=True) runs ordo's kernel without gradients, with eager's bits;
    with them under torch2.15-cpu, torch's kernel and a warning (strict=True raises).
  - Compiled inside pinned(torch2.15-cpu), the ops ordo does not run keep eager's kernels
    (Inductor's lite mode) and a training dropout keeps eager's composite: eager's bits, where
    plain compile differs; pinned("fast") and eager_kernels=False keep Inductor's kernels.
"""
import atexit
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

# Inductor's compiled code goes to a cache of this run's own, removed when the script exits.
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="ordo_test_inductor_")
    atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], True)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

WANT_TORCH = "2.15.0"
EXACT = "torch2.15-cpu"
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def bits(t):
    t = t.detach().contiguous()
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def same(a, b):
    """Same dtype, shape and bit patterns; every NaN equals every NaN."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return bool(((bits(a) == bits(b)) | (a.detach().isnan() & b.detach().isnan())).all())


def fallback_warnings(record):
    import ordo.torch as ot
    return [str(r.message) for r in record if issubclass(r.category, ot.OrdoFallbackWarning)]


class OpLog(TorchDispatchMode):
    """The operators that reach the dispatcher, by name: ordo's custom ops among them."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


class Recorder:
    """A torch.compile backend that keeps the graph's call targets and runs it as traced."""

    def __init__(self):
        self.targets = []

    def __call__(self, gm, example_inputs):
        self.targets += [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        return gm.forward


def test_import_is_lazy():
    r = subprocess.run([sys.executable, "-c", "import sys, ordo; ordo.layer_norm; assert 'torch' not in sys.modules, 'torch imported'"],
                       capture_output=True, text=True)
    check(r.returncode == 0, f"import ordo imports no torch {r.stderr.strip()[-200:]}")
    # A pinned block of eager code does not import Inductor's compiler (torch._inductor.compile_fx
    # and its lowerings: about a second); only a compile does.
    code = ("import sys, torch, torch.nn.functional as F, ordo.torch as ot\n"
            "with ot.pinned('torch2.15-cpu'):\n"
            "    F.silu(torch.randn(4, 8)); F.layer_norm(torch.randn(4, 8), (8,))\n"
            "assert 'torch._inductor.compile_fx' not in sys.modules, 'Inductor compile_fx imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    check(r.returncode == 0, f"a pinned block of eager code imports no Inductor {r.stderr.strip()[-200:]}")


def test_aten_shim():
    """ordo.torch reads and allocates torch tensors through libordo_aten.so, built for the venv's
    torch (python/aten_shim.h): loaded here; refused, naming both versions, for another torch; and
    a kernel's checks on the tensors it is given are the same through it (CPU, contiguous, dtype,
    length), each named."""
    import ordo._ordo as native
    import ordo.torch as ot
    check(ot.ATEN_SHIM_MISSING == "" and native.aten_shim_loaded(), f"the ATen shim is loaded: {ot.ATEN_SHIM_MISSING!r}")
    path = os.path.join(os.path.dirname(native.__file__), "libordo_aten.so")
    code = (f"import torch, ordo._ordo as o\n"
            f"why = o.load_aten_shim({path!r}, '0.0.1')\n"
            f"assert 'built for torch ' + str(torch.__version__) in why and '0.0.1' in why and not o.aten_shim_loaded(), why")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    check(r.returncode == 0, f"a shim for another torch is refused, naming both versions {r.stderr.strip()[-200:]}")
    for setting, want in (("off", "ORDO_ATEN_SHIM=off"), ("maybe", "'on' (the default) or 'off'")):
        r = subprocess.run([sys.executable, "-c", "import ordo.torch as ot; print(ot.ATEN_SHIM_MISSING)"], capture_output=True, text=True,
                           env={**os.environ, "ORDO_ATEN_SHIM": setting})
        check(want in r.stdout + r.stderr and (r.returncode == 0) == (setting == "off"),
              f"ORDO_ATEN_SHIM={setting}: {(r.stdout + r.stderr).strip()[-120:]}")
    kernel = native.compile("softmax", 16, "f32", "", EXACT)
    x = torch.randn(3, 16)
    y = torch.empty(3, 16)
    kernel.run_torch([x, y], 3, 0)
    check(same(y, torch.softmax(x, -1)), "run_torch through the shim: torch's softmax bits")
    for text, tensors in (("not contiguous", [torch.randn(16, 3).t(), y]), ("dtype", [x.double(), y]),
                          ("dtype torch.int32", [x.int(), y]),
                          ("not a CPU tensor", [torch.empty(3, 16, device="meta"), y]), ("x", [torch.randn(3, 15), y])):
        try:
            kernel.run_torch(tensors, 3, 0)
            check(False, f"run_torch refuses a tensor that is {text}")
        except ValueError as e:
            check(text in str(e), f"run_torch refuses, naming it: {str(e)[:90]}")
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        fake = torch.randn(3, 16)
    try:
        kernel.run_torch([fake, y], 3, 0)
        check(False, "run_torch refuses a fake tensor")
    except ValueError as e:
        check(str(e).startswith("x: "), f"run_torch refuses a fake tensor (no address) with an error naming it, not a crash: {str(e)[:60]}")
    rows = kernel.run_rows(torch.randn(16, 2).t(), None, None, False)  # not contiguous: run_rows makes a copy
    check(rows.shape == (2, 16) and rows.is_contiguous(), f"run_rows allocates x's shape through the shim: {tuple(rows.shape)}")


def test_ops_exact():
    import ordo.torch as ot
    g = torch.Generator().manual_seed(1)
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        x = (torch.randn(3, 5, 300, generator=g) * 3 + 1).to(dt)
        w, b = torch.randn(300, generator=g).to(dt), torch.randn(300, generator=g).to(dt)
        check(same(ot.layer_norm(x, (300,), w, b, 1e-5, order=EXACT), F.layer_norm(x, (300,), w, b)), f"layer_norm {dt}")
        check(same(ot.layer_norm(x, [300], order=EXACT), F.layer_norm(x, [300])), f"layer_norm {dt} without weight and bias")
        check(same(ot.rms_norm(x, (300,), w, order=EXACT), F.rms_norm(x, (300,), w)), f"rms_norm {dt} eps=None")
        check(same(ot.rms_norm(x, (300,), None, 1e-6, order=EXACT), F.rms_norm(x, (300,), None, 1e-6)), f"rms_norm {dt} no weight")
        check(same(ot.softmax(x, -1, order=EXACT), torch.softmax(x, -1)), f"softmax {dt}")
        check(same(ot.log_softmax(x, 2, order=EXACT), torch.log_softmax(x, 2)), f"log_softmax {dt}")
    x = torch.randn(4, 7, 64, generator=g).bfloat16()
    w, b = torch.randn(64, generator=g), torch.randn(64, generator=g)
    check(same(ot.layer_norm(x, (64,), w, b, order=EXACT), F.layer_norm(x, (64,), w, b)), "layer_norm bf16 input, f32 weight and bias")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own note that mixed dtypes skip its fused kernel
        check(same(ot.rms_norm(x, (64,), w, order=EXACT), F.rms_norm(x, (64,), w)), "rms_norm bf16 input, f32 weight")
    check(same(ot.softmax(x, -1, torch.float32, order=EXACT), F.softmax(x, -1, dtype=torch.float32)), "softmax bf16 with dtype=float32")
    x = torch.randn(6, 10, 12, generator=g)
    w = torch.randn(10, 12, generator=g)
    check(same(ot.layer_norm(x, (10, 12), w, order=EXACT), F.layer_norm(x, (10, 12), w)), "layer_norm over two dims")
    check(same(ot.rms_norm(x, (10, 12), w, order=EXACT), F.rms_norm(x, (10, 12), w)), "rms_norm over two dims")
    for dt in (torch.float32, torch.bfloat16):
        q = torch.randn(2, 3, 37, 64, generator=g).to(dt)
        k, v = torch.randn(2, 3, 45, 64, generator=g).to(dt), torch.randn(2, 3, 45, 64, generator=g).to(dt)
        for causal, scale in ((False, None), (True, None), (True, 0.3)):
            check(same(ot.scaled_dot_product_attention(q, k, v, causal, scale, order=EXACT),
                       F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)),
                  f"scaled_dot_product_attention {dt} causal={causal} scale={scale}")
    for bad, call in (("dim=0", lambda: ot.softmax(x, 0, order=EXACT)),
                      ("float64", lambda: ot.layer_norm(x.double(), (12,), order=EXACT)),
                      ("normalized_shape [5]", lambda: ot.layer_norm(x, (5,), order=EXACT)),
                      ("unknown order 'nope'", lambda: ot.softmax(x, -1, order="nope"))):
        try:
            call()
            check(False, f"bad input {bad} raises")
        except (ValueError, RuntimeError) as e:
            check(bad in str(e), f"bad input {bad} raises, naming it: {str(e)[:120]}")


def test_ops_compiled():
    import ordo.torch as ot
    x = torch.randn(5, 128)
    w = torch.randn(128)
    q, k, v = (torch.randn(1, 2, 16, 32) for _ in range(3))

    def f(x, q):
        return (ot.layer_norm(x, (128,), w, w, order=EXACT), ot.rms_norm(x, (128,), w, order=EXACT),
                ot.softmax(x, -1, order=EXACT), ot.log_softmax(x, -1, order=EXACT),
                ot.scaled_dot_product_attention(q, k, v, True, order=EXACT))

    explanation = torch._dynamo.explain(f)(x, q)
    check(explanation.graph_count == 1 and explanation.graph_break_count == 0,
          f"the custom ops trace as one graph (graphs {explanation.graph_count}, breaks {explanation.graph_break_count})")
    torch._dynamo.reset()
    got = torch.compile(f, fullgraph=True)(x, q)
    want = (F.layer_norm(x, (128,), w, w), F.rms_norm(x, (128,), w), torch.softmax(x, -1), torch.log_softmax(x, -1),
            F.scaled_dot_product_attention(q, k, v, is_causal=True))
    check(all(same(a, b) for a, b in zip(want, got)), "the custom ops compiled by Inductor equal eager torch")


def spellings(x, q, k, v, ln, rms):
    """Every call pinned routes, on the last dim."""
    return (F.layer_norm(x, (x.shape[-1],), ln.weight, ln.bias), torch.layer_norm(x, [x.shape[-1]]), ln(x),
            F.rms_norm(x, (x.shape[-1],), rms.weight), torch.rms_norm(x, [x.shape[-1]], None, 1e-5), rms(x),
            F.softmax(x, dim=-1), torch.softmax(x, -1), x.softmax(-1), nn.Softmax(dim=-1)(x),
            F.log_softmax(x, -1), torch.log_softmax(x, dim=-1), x.log_softmax(-1), nn.LogSoftmax(-1)(x),
            F.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.2))


def test_pinned():
    import ordo.torch as ot
    g = torch.Generator().manual_seed(2)
    for dt in (torch.float32, torch.bfloat16):
        x = torch.randn(4, 9, 256, generator=g).to(dt)
        # q, k, v as a projection's strided [batch, heads, seq, head_dim] views (last dim contiguous)
        q, k, v = torch.randn(2, 33, 3, 4, 64, generator=g).to(dt).permute(2, 0, 3, 1, 4)
        ln, rms = nn.LayerNorm(256).to(dt), nn.RMSNorm(256).to(dt)
        with torch.no_grad():
            nn.init.normal_(ln.weight, generator=g), nn.init.normal_(ln.bias, generator=g), nn.init.normal_(rms.weight, generator=g)
            want = spellings(x, q, k, v, ln, rms)
            # Routing: with an order torch lacks, each spelling must give ordo's bits for that order.
            with ot.pinned("fast"), OpLog() as log:
                routed = spellings(x, q, k, v, ln, rms)
            ran = [n for n in log.names if n.startswith("ordo.")]
            theirs = [n for n in log.names if any(s in n for s in ("norm", "softmax", "attention")) and not n.startswith("ordo.")]
            check(len(ran) == 16 and not theirs, f"pinned eager runs 16 ordo ops and none of torch's ({dt}): {theirs}")
            direct = [ot.layer_norm(x, (256,), ln.weight, ln.bias, order="fast"),
                      ot.layer_norm(x, (256,), order="fast"),
                      ot.layer_norm(x, (256,), ln.weight, ln.bias, order="fast"),
                      ot.rms_norm(x, (256,), rms.weight, order="fast"),
                      ot.rms_norm(x, (256,), None, 1e-5, order="fast"),
                      ot.rms_norm(x, (256,), rms.weight, order="fast")]
            direct += [ot.softmax(x, order="fast")] * 4 + [ot.log_softmax(x, order="fast")] * 4
            direct += [ot.scaled_dot_product_attention(q, k, v, order="fast"),
                       ot.scaled_dot_product_attention(q, k, v, True, 0.2, order="fast")]
            check(all(same(a, b) for a, b in zip(routed, direct)), f"pinned routes all 16 spellings to ordo ({dt})")
            with ot.pinned(EXACT, strict=True):
                eager = spellings(x, q, k, v, ln, rms)
            check(all(same(a, b) for a, b in zip(want, eager)), f"pinned({EXACT}) eager equals torch, 16 spellings ({dt})")
            torch._dynamo.reset()
            rec = Recorder()
            with ot.pinned(EXACT, strict=True, kernels="ordo"):
                traced = torch.compile(spellings, backend=rec, fullgraph=True)(x, q, k, v, ln, rms)
            ordo_ops = [t for t in rec.targets if t.startswith("ordo.")]
            torch_ops = [t for t in rec.targets if any(s in t for s in ("norm", "softmax", "attention")) and not t.startswith("ordo.")]
            check(len(ordo_ops) == 16 and not torch_ops, f"the compiled graph holds 16 ordo ops and none of torch's ({dt}): {torch_ops}")
            check(all(same(a, b) for a, b in zip(want, traced)), f"the traced graph equals torch ({dt})")
            torch._dynamo.reset()
            with ot.pinned(EXACT, strict=True):
                compiled = torch.compile(spellings, fullgraph=True)(x, q, k, v, ln, rms)
            check(all(same(a, b) for a, b in zip(want, compiled)), f"compiled by Inductor inside pinned equals eager torch ({dt})")
    torch._dynamo.reset()


def test_pinned_fastest():
    """pinned(torch2.15-cpu)'s default kernels="fastest": where torch's own kernel gives the
    order's bits (the running torch's order, in eager code or lite mode), the faster of it and
    ordo's runs, measured once per call signature. Both branches are forced here (the timing
    replaced) and must give eager's bits; an order torch does not run here never takes torch's."""
    import ordo.torch as ot
    g = torch.Generator().manual_seed(12)
    x = torch.randn(5, 3, 96, generator=g)
    w, b = torch.randn(96, generator=g), torch.randn(96, generator=g)
    q, k, v = torch.randn(2, 21, 3, 4, 32, generator=g).permute(2, 0, 3, 1, 4)

    def f(x, q, k, v):
        return (F.layer_norm(x, (96,), w, b), F.rms_norm(x, (96,), w), torch.softmax(x, -1), F.log_softmax(x, -1),
                F.scaled_dot_product_attention(q, k, v, is_causal=True))

    want = f(x, q, k, v)
    measured = ot._torch_is_faster
    asked = []
    try:
        for torch_faster in (True, False):
            def timing(op, run, call, specs, in_graph, answer=torch_faster):
                asked.append((op, in_graph))
                return answer
            ot._torch_is_faster = timing
            ot._route_in_eager.cache_clear()
            torch._dynamo.reset()
            with torch.no_grad():
                with ot.pinned(EXACT, strict=True), OpLog() as log:
                    eager = f(x, q, k, v)
                ran = [n for n in log.names if n.startswith("ordo.")]
                rec = Recorder()
                with ot.pinned(EXACT, strict=True):
                    traced = torch.compile(f, backend=rec, fullgraph=True)(x, q, k, v)
                in_graph = [t for t in rec.targets if t.startswith("ordo.")]
                torch._dynamo.reset()
                with ot.pinned(EXACT, strict=True):
                    compiled = torch.compile(f, fullgraph=True)(x, q, k, v)
            which = "torch's" if torch_faster else "ordo's"
            check(all(same(a, b) for a, b in zip(want, eager)) and all(same(a, b) for a, b in zip(want, traced))
                  and all(same(a, b) for a, b in zip(want, compiled)),
                  f"kernels='fastest' choosing {which} kernels: eager, traced and compiled equal torch")
            check(len(ran) == (0 if torch_faster else 5) and len(in_graph) == (0 if torch_faster else 5),
                  f"kernels='fastest' choosing {which}: ordo ops eager {len(ran)}, in the graph {len(in_graph)}")
        # torch's kernels chosen in a compiled graph with gradients: lite mode then compiles
        # aten.native_layer_norm_backward, which Inductor 2.15 refuses to make a fallback
        # unless pinned allows it (_LiteModeFallbacks).
        ot._torch_is_faster = lambda *args: True
        ot._route_in_eager.cache_clear()
        torch._dynamo.reset()
        grads = []
        for use_pinned in (False, True):
            xg = x.clone().requires_grad_(True)
            ln = nn.LayerNorm(96)
            with torch.no_grad():
                ln.weight.copy_(w), ln.bias.copy_(b)
            if use_pinned:
                with ot.pinned(EXACT, strict=True):
                    y = torch.compile(lambda t: torch.softmax(ln(t), -1))(xg)
            else:
                y = torch.softmax(ln(xg), -1)
            y.backward(torch.ones_like(y) / 7)
            grads.append((y, xg.grad, ln.weight.grad, ln.bias.grad))
        check(all(same(a, b) for a, b in zip(*grads)),
              "torch's kernels chosen, compiled with gradients (layer_norm and softmax backward in lite mode): eager's bits")
        check({op for op, _ in asked} == {"layer_norm", "rms_norm", "softmax", "log_softmax", "scaled_dot_product_attention"}
              and {g for _, g in asked} == {True, False}, f"every routed op was timed, in eager code and in graphs")
        # Only the running torch's alias is timed against torch: not an order with its own thread
        # count, nor under kernels="ordo", nor with another backward order, nor an order torch lacks.
        asked.clear()
        ot._route_in_eager.cache_clear()
        with torch.no_grad():
            with ot.pinned(f"{EXACT}(threads=1)"):
                f(x, q, k, v)
            with ot.pinned(EXACT, kernels="ordo"):
                f(x, q, k, v)
            with ot.pinned(EXACT, backward_order="flash"):
                f(x, q, k, v)
            with ot.pinned("fast"):
                f(x, q, k, v)
        check(not asked, f"no timing for an order torch does not compute here: {asked}")
    finally:
        ot._torch_is_faster = measured
        ot._route_in_eager.cache_clear()
        torch._dynamo.reset()
    # A timing that changes its mind each time it is asked: the answer pinned remembers per call
    # signature keeps a trace that Dynamo restarts after a graph break on one branch.
    timed = ot._time_torch_against_ordo
    flips = [0]

    def flipping(*args):
        flips[0] += 1
        return flips[0] % 2 == 1

    def with_break(x):
        y = F.layer_norm(x, (96,), w, b)
        torch._dynamo.graph_break()
        return torch.softmax(y, -1), F.layer_norm(y, (96,), w, b)

    try:
        ot._time_torch_against_ordo = flipping
        ot._torch_is_faster.cache_clear()
        torch._dynamo.reset()
        try:
            with torch.no_grad(), ot.pinned(EXACT, strict=True):
                got = torch.compile(with_break)(x)
            ok, why = all(same(a, b) for a, b in zip(with_break(x), got)) and flips[0] >= 2, f"{flips[0]} asked"
        except Exception as e:  # noqa: BLE001 - Dynamo's SpeculationLogDivergence when a branch changes
            ok, why = False, f"{type(e).__name__}: {str(e)[:120]}"
        check(ok, f"a timing that flips under a graph break: the compile succeeds with eager's bits ({why})")
    finally:
        ot._time_torch_against_ordo = timed
        ot._torch_is_faster.cache_clear()
        torch._dynamo.reset()
    # The measurement itself, on specimens of the call's layouts (q, k, v strided, K/V expanded).
    # Timing leaves torch's global random stream where it was (dropout's masks depend on it).
    state = torch.random.get_rng_state()
    ot._time_torch_against_ordo("softmax", f"{EXACT}(threads=2)", ("float32", 2, 64, -1, ""), (((3, 64), (64, 1), "float32"),), False)
    check(torch.equal(state, torch.random.get_rng_state()), "timing draws no number from torch's global generator")
    for op, call, specs in (
            ("layer_norm", ("float32", "float32", "float32", 96, 1e-5, True),
             (((15, 96), (96, 1), "float32"), ((96,), (1,), "float32"), ((96,), (1,), "float32"), (96,))),
            ("softmax", ("bfloat16", 2, 300, -1, "float32"), (((7, 300), (300, 1), "bfloat16"),)),
            ("scaled_dot_product_attention",
             ("float32",) * 3 + (4, True, 32, 21, 21, (True,) * 3, False, 0.0, True, None, 2, False),
             (((2, 4, 21, 32), (2688, 32, 128, 1), "float32"), ((2, 2, 21, 32), (1344, 32, 64, 1), "float32"),
              ((2, 2, 21, 32), (1344, 32, 64, 1), "float32")))):
        for in_graph in (False, True):
            answer = ot._time_torch_against_ordo(op, f"{EXACT}(threads=2)", call, specs, in_graph)
            check(type(answer) is bool, f"timing {op} (in a graph: {in_graph}) answers {answer}")


def test_pinned_defers_new_signatures():
    """pinned(torch2.15-cpu)'s kernels="fastest" in eager code: a call signature runs torch's kernel
    (the order's bits) until torch has spent _MEASURE_AFTER_S on it, and only then is ordo's
    kernel compiled and timed. A decode loop (a new K/V length at every step, as in generate())
    compiles and times nothing; a signature called often is measured once; strict=True asks at
    the first call."""
    import ordo
    import ordo.torch as ot
    g = torch.Generator().manual_seed(31)
    q = torch.randn(1, 4, 1, 32, generator=g)
    keys, values = torch.randn(1, 4, 60, 32, generator=g), torch.randn(1, 4, 60, 32, generator=g)
    x = torch.randn(3, 96, generator=g)
    measured, budget, entries = ot._torch_is_faster, ot._MEASURE_AFTER_S, ot._TORCH_SECONDS_ENTRIES
    asked = []

    def ordo_faster(op, run, call, specs, in_graph):
        asked.append(op)
        return False

    try:
        ot._torch_is_faster = ordo_faster
        ot._route_in_eager.cache_clear()
        ot._torch_seconds.clear()
        misses = ordo.cache_stats()["misses"]
        with torch.no_grad():
            want = [F.scaled_dot_product_attention(q, keys[:, :, :s], values[:, :, :s]) for s in range(1, 61)]
            with ot.pinned(EXACT), OpLog() as log:
                got = [F.scaled_dot_product_attention(q, keys[:, :, :s], values[:, :, :s]) for s in range(1, 61)]
        requested = ordo.cache_stats()["misses"] - misses
        check(all(same(a, b) for a, b in zip(want, got)), "a decode loop inside pinned: every step eager's bits")
        check(not asked and requested == 0 and not any(n.startswith("ordo.") for n in log.names),
              f"a decode loop inside pinned: 60 new signatures ran torch's kernel, none timed ({asked}) or compiled ({requested})")
        charged = [spent for key, spent in ot._torch_seconds.items() if key[0] == "scaled_dot_product_attention"]
        check(len(charged) == 60 and all(spent > 0 for spent in charged), f"each step's time charged to its signature ({len(charged)})")
        # A signature called again and again: measured once torch has spent the budget on it, then
        # ordo's kernel runs (the timing answers that it is faster), with the same bits.
        ot._MEASURE_AFTER_S = 0.003
        want = F.layer_norm(x, (96,))
        calls, ran = 0, []
        with torch.no_grad(), ot.pinned(EXACT), OpLog() as log:
            while not asked and calls < 100000:
                ok = same(F.layer_norm(x, (96,)), want)
                calls += 1
                if not ok:
                    break
            for _ in range(3):
                ok &= same(F.layer_norm(x, (96,)), want)
        ran = [n for n in log.names if n.startswith("ordo.")]
        # The call that reached the budget is timed and runs ordo's kernel, as do the three after it.
        check(ok and asked == ["layer_norm"] and 2 < calls < 100000 and len(ran) == 4,
              f"a repeated signature: {calls - 1} calls on torch's kernel, then timed ({asked}), and ordo's kernel ran the "
              f"next {len(ran)}; eager's bits throughout: {ok}")
        # strict=True: every call's refusal is raised at once, so the first call is routed (timed).
        asked.clear()
        with torch.no_grad(), ot.pinned(EXACT, strict=True):
            F.softmax(x[:, :40], -1)
        check(asked == ["softmax"], f"strict=True: the first call of a signature is timed ({asked})")
        # The record of torch's time per signature is bounded: past it the oldest goes first.
        ot._torch_seconds.clear()
        ot._TORCH_SECONDS_ENTRIES = 3
        for i in range(10):
            ot._defers_to_torch(("signature", i))
        check(list(ot._torch_seconds) == [("signature", i) for i in (7, 8, 9)],
              f"the per-signature record keeps its last 3 entries: {list(ot._torch_seconds)}")
    finally:
        ot._TORCH_SECONDS_ENTRIES = entries
        ot._torch_is_faster, ot._MEASURE_AFTER_S = measured, budget
        ot._route_in_eager.cache_clear()
        ot._torch_seconds.clear()


def test_empty_rows():
    """Rows of no elements (a last dim of 0): torch's results (empty; sum's zeros, mean's NaN) from
    every ordo.torch row op, with a gradient, and inside pinned(strict=True) without a fallback."""
    import ordo.torch as ot
    calls = [
        ("layer_norm", lambda x: F.layer_norm(x, (0,)), lambda x: ot.layer_norm(x, (0,), order=EXACT)),
        ("rms_norm", lambda x: F.rms_norm(x, (0,)), lambda x: ot.rms_norm(x, (0,), order=EXACT)),
        ("softmax", lambda x: torch.softmax(x, -1), lambda x: ot.softmax(x, -1, order=EXACT)),
        ("log_softmax", lambda x: F.log_softmax(x, -1), lambda x: ot.log_softmax(x, -1, order=EXACT)),
        ("sum", lambda x: x.sum(-1), lambda x: ot.sum(x, -1, order=EXACT)),
        ("mean", lambda x: x.mean(-1, keepdim=True), lambda x: ot.mean(x, -1, True, order=EXACT)),
        ("silu", F.silu, lambda x: ot.silu(x, order=EXACT)),
    ]
    for name, theirs, ours in calls:
        for dt in (torch.float32, torch.bfloat16):
            x = torch.empty(3, 0, dtype=dt, requires_grad=True)
            want, got = theirs(x), ours(x)
            with torch.no_grad(), warnings.catch_warnings(record=True) as record:
                warnings.simplefilter("always")
                with ot.pinned(EXACT, strict=True):
                    routed = theirs(x)
            check(same(want, got) and same(want, routed) and got.requires_grad and not fallback_warnings(record),
                  f"{name} of {tuple(x.shape)} {dt}: torch's {tuple(want.shape)} result, eager and inside pinned(strict=True)")
    # An empty batch (no rows): the weight gradients are the sums of no rows, torch's zeros (the
    # column stages run on a launch of no rows, Kernel::runs_without_rows).
    for dt in (torch.float32, torch.bfloat16):
        for name in ("layer_norm", "rms_norm"):
            grads = []
            for fn in ((F.layer_norm, lambda *a: ot.layer_norm(*a, order=EXACT)) if name == "layer_norm" else
                       (F.rms_norm, lambda *a: ot.rms_norm(*a, order=EXACT))):
                x = torch.empty(0, 40, dtype=dt, requires_grad=True)
                w = torch.randn(40, dtype=dt, requires_grad=True)
                args = (x, (40,), w) + ((torch.randn(40, dtype=dt, requires_grad=True),) if name == "layer_norm" else ())
                fn(*args).backward(torch.empty(0, 40, dtype=dt))
                grads.append([a.grad for a in args if isinstance(a, torch.Tensor)])
            check(all(same(a, b) for a, b in zip(*grads)), f"{name} of an empty batch, {dt}: torch's gradients (dweight zeros)")


def test_layouts_and_dtypes():
    import ordo.torch as ot
    g = torch.Generator().manual_seed(3)
    base = torch.randn(200, 24, generator=g)
    xt = base.t()                       # [24, 200], last dim stride 24
    xs = torch.randn(24, 300, generator=g)[:, 50:250]  # rows strided, last dim contiguous
    xb = torch.randn(3, 5, 200, generator=g).bfloat16()
    wf, bf = torch.randn(200, generator=g), torch.randn(200, generator=g)
    q, k, v = torch.randn(2, 40, 3, 4, 32, generator=g).permute(2, 0, 3, 1, 4)
    with torch.no_grad(), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with ot.pinned(EXACT):
            got = [F.layer_norm(xt, (200,)), F.softmax(xt, -1), F.log_softmax(xt, -1), F.rms_norm(xs, (200,)),
                   F.layer_norm(xb, (200,), wf, bf), F.rms_norm(xb, (200,), wf), F.softmax(xb, -1, dtype=torch.float32),
                   F.scaled_dot_product_attention(q, k, v, is_causal=True)]
        want = [F.layer_norm(xt, (200,)), F.softmax(xt, -1), F.log_softmax(xt, -1), F.rms_norm(xs, (200,)),
                F.layer_norm(xb, (200,), wf, bf), F.rms_norm(xb, (200,), wf), F.softmax(xb, -1, dtype=torch.float32),
                F.scaled_dot_product_attention(q, k, v, is_causal=True)]
    names = ["layer_norm transposed", "softmax transposed", "log_softmax transposed", "rms_norm rows strided",
             "layer_norm bf16 with f32 weight, bias", "rms_norm bf16 with f32 weight", "softmax bf16 dtype=float32",
             "sdpa permuted q, k, v"]
    for name, a, b in zip(names, got, want):
        check(same(a, b), f"pinned {name} equals torch")
    check(not fallback_warnings(record), f"none of them falls back: {fallback_warnings(record)}")
    # One row longer than 32768: torch 2.15 splits rms_norm's sum between its threads; pinned
    # names torch's thread count in the order.
    long_row = torch.randn(1, 70001, generator=torch.Generator().manual_seed(0)) * 3 + 1
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with torch.no_grad(), ot.pinned(EXACT, strict=True):
            got = F.rms_norm(long_row, (70001,))
        want = F.rms_norm(long_row, (70001,))
        check(same(got, want), "pinned rms_norm of one 70001-long row on 2 torch threads equals torch")
        check(not same(ot.rms_norm(long_row, (70001,), order=EXACT), want), "(and the one-thread order would not)")
    finally:
        torch.set_num_threads(threads)


def test_fallbacks():
    import ordo.torch as ot
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 40, generator=g)
    q, k, v = (torch.randn(1, 2, 9, 32, generator=g) for _ in range(3))
    mask = torch.ones(9, 9, dtype=torch.bool).tril()
    # (reason the warning must name, the call): each runs torch's own op
    calls = [
        ("input dtype float64", lambda: F.layer_norm(x.double(), (40,))),
        ("dim=0 is not the last dim", lambda: torch.softmax(x, 0)),
        ("dim=None", lambda: F.log_softmax(x)),
        ("attn_mask is 3-D", lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None])),
        ("dropout_p=0.5", lambda: F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)),
        ("query is 3-D", lambda: F.scaled_dot_product_attention(q[0], k[0], v[0])),
        ("a last dim is strided", lambda: F.scaled_dot_product_attention(q, k, v.transpose(-1, -2).contiguous().transpose(-1, -2))),
        ("last dim is strided: torch's rms_norm", lambda: F.rms_norm(x.t(), (6,))),
        ("D = 12 must be a multiple of 8", lambda: F.scaled_dot_product_attention(*(t[..., :12].contiguous() for t in (q, k, v)))),
    ]
    with torch.no_grad():
        for reason, call in calls:
            torch.manual_seed(0)  # dropout draws the same mask each time
            want = call()
            got = []
            with warnings.catch_warnings(record=True) as record:
                warnings.simplefilter("always")
                with ot.pinned(EXACT):
                    for _ in range(3):
                        torch.manual_seed(0)
                        got.append(call())
            texts = fallback_warnings(record)
            check(len(texts) == 1 and reason in texts[0] and all(same(want, y) for y in got),
                  f"fallback {reason}: torch's result, one warning for three calls: {texts}")
            try:
                with ot.pinned(EXACT, strict=True):
                    call()
                check(False, f"strict {reason} raises")
            except ValueError as e:
                check(reason in str(e) and "cannot run in ordo" in str(e), f"strict {reason} raises ValueError naming it")
        # An argument pinned's routing cache cannot key (a list for dim): the refusal names it, and
        # torch's own call then raises its own error, as without ordo.
        try:
            with ot.pinned(EXACT, strict=True):
                F.softmax(x, [1])
            check(False, "strict softmax with dim=[1] raises")
        except ValueError as e:
            check("dim=[1] is not an int" in str(e), f"strict softmax with dim=[1] raises ValueError naming it: {e}")
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            try:
                with ot.pinned(EXACT):
                    F.softmax(x, [1])
                check(False, "softmax with dim=[1] raises torch's error")
            except TypeError as e:
                check("dim" in str(e) and any("dim=[1] is not an int" in t for t in fallback_warnings(record)),
                      f"softmax with dim=[1]: torch's TypeError ({e}) after ordo's warning")
        # Compiled: the warning comes once per block, from the graph as it runs; strict raises when tracing.
        torch._dynamo.reset()
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            with ot.pinned(EXACT):
                f = torch.compile(lambda t: torch.softmax(t, 0) + F.softmax(t, -1), fullgraph=True)
                got = [f(x) for _ in range(3)]
        texts = fallback_warnings(record)
        check(len(texts) == 1 and "dim=0" in texts[0] and all(same(got[0], y) for y in got),
              f"compiled fallback warns once per block: {texts}")
        # The same compiled graph, run again in a new block, warns there too (once).
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            with ot.pinned(EXACT):
                again = [f(x) for _ in range(2)]
        texts = fallback_warnings(record)
        check(len(texts) == 1 and "dim=0" in texts[0] and all(same(got[0], y) for y in again),
              f"a reused compiled graph warns once in a new block: {texts}")
        # strict=True after a non-strict compile of the same function raises: the block's
        # strictness is part of what the graph was traced for.
        try:
            with ot.pinned(EXACT, strict=True):
                f(x)
            check(False, "strict raises after a non-strict compile of the same function")
        except Exception as e:
            check("dim=0 is not the last dim" in str(e),
                  f"strict raises after a non-strict compile of the same function, naming the reason ({type(e).__name__})")
        torch._dynamo.reset()
        try:
            with ot.pinned(EXACT, strict=True):
                torch.compile(lambda t: torch.softmax(t, 0), fullgraph=True)(x)
            check(False, "strict raises under torch.compile")
        except Exception as e:  # fullgraph: Dynamo's Unsupported, with the ValueError in its text
            check("dim=0 is not the last dim" in str(e), f"strict raises under torch.compile, naming the reason ({type(e).__name__})")
        torch._dynamo.reset()
    try:
        with ot.pinned(EXACT):
            F.layer_norm(x, (7,))
        check(False, "a normalized_shape that does not fit raises inside pinned")
    except RuntimeError as e:  # torch's own error, as outside the block
        check("normalized_shape" in str(e), f"a normalized_shape that does not fit raises torch's error: {str(e)[:80]}")
    for bad in ("nope", "llama-rmsnorm-torch2.15-cpu"):
        try:
            ot.pinned(bad)
            check(False, f"pinned({bad!r}) raises")
        except ValueError as e:
            check(bad in str(e), f"pinned({bad!r}) raises ValueError: {str(e)[:100]}")


def test_new_shapes():
    """Compiled inside pinned, with automatic dynamic shapes (the default) and with dynamic=True:
    the sizes ordo compiles a kernel for (the reduced length, the attention shape) are
    specialized with a guard, every other size stays symbolic, and every result is eager's."""
    import ordo.torch as ot
    from torch._inductor.compile_fx import compile_fx
    w = torch.randn(64)
    graphs = [0]

    def inductor_counting(gm, example_inputs):  # Inductor, counting the graphs it compiles
        graphs[0] += 1
        return compile_fx(gm, example_inputs)

    def f(x, q):
        return (F.layer_norm(x, (64,), w), F.rms_norm(x, x.shape[-1:]), torch.softmax(x, -1),
                F.scaled_dot_product_attention(q, q, q, is_causal=True))

    def frames():
        return graphs[0]

    torch._dynamo.reset()
    with torch.no_grad():
        ok = True
        with ot.pinned(EXACT, strict=True):
            compiled = torch.compile(f, fullgraph=True)
            cases = [(torch.randn(3, s, 64), torch.randn(1, 2, s, 64)) for s in (9, 17, 33)]
            got = [compiled(*c) for c in cases]
        for c, outs in zip(cases, got):
            ok &= all(same(a, b) for a, b in zip(f(*c), outs))
        check(ok, "compiled inside pinned, three sequence lengths (automatic dynamic shapes) equal eager")
        torch._dynamo.reset()
        with ot.pinned(EXACT, strict=True):
            compiled = torch.compile(f, fullgraph=True, dynamic=True, backend=inductor_counting)
            start = frames()
            # Batch sizes other than the 2 heads: Dynamo gives equal sizes one symbol, so a batch
            # of 2 would be specialized with the heads.
            batches = [(torch.randn(b, 17, 64), torch.randn(b, 2, 17, 64)) for b in (3, 4, 5)]
            got = [compiled(*c) for c in batches]
            one_length = frames() - start
            longer = (torch.randn(3, 30, 64), torch.randn(3, 2, 30, 64))
            got.append(compiled(*longer))
            two_lengths = frames() - start
        ok = all(all(same(a, b) for a, b in zip(f(*c), outs)) for c, outs in zip(batches + [longer], got))
        check(ok, "dynamic=True inside pinned: three batch sizes and a second length equal eager")
        check(one_length == 1, f"dynamic=True inside pinned: batch sizes 3, 4 and 5 share one graph ({one_length} compiled)")
        check(two_lengths == 2, f"dynamic=True inside pinned: a new sequence length compiles once more ({two_lengths} in all)")
    torch._dynamo.reset()


def test_decode_compiles_once():
    """A decode loop (one query, K and V growing a key per step) through ordo.torch with a flash
    order compiles one kernel for every S_k, given at launch, and each step has the bits of the
    kernel built for that S_k alone; torch2.15-cpu (PyTorch's own kernel, whose blocks are fixed
    by S_k) compiles per length."""
    import ordo
    import ordo.torch as ot
    torch.manual_seed(5)
    for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        q = torch.randn(1, 4, 1, 32, dtype=dtype)
        keys = torch.randn(1, 4, 70, 32, dtype=dtype)
        values = torch.randn(1, 4, 70, 32, dtype=dtype)
        for order in ("fast", "flash"):
            misses = ordo.cache_stats()["misses"]
            outs = [ot.scaled_dot_product_attention(q, keys[:, :, :s].contiguous(), values[:, :, :s].contiguous(), order=order)
                    for s in range(1, 71)]
            compiled = ordo.cache_stats()["misses"] - misses
            check(compiled <= 1, f"{name} {order}: 70 decode steps compiled {compiled} kernel(s)")
            ok = True
            for s in (1, 2, 31, 32, 33, 63, 64, 65, 70):
                kernel = ordo._ordo.compile_attention(32, 1, s, name, order)
                want = torch.empty_like(q)
                kernel.run_torch([q, keys[:, :, :s].contiguous(), values[:, :, :s].contiguous(), want], 4, 0)
                ok &= same(outs[s - 1], want)
            check(ok, f"{name} {order}: every decode step has the bits of the kernel built for its S_k")
            # With a padding mask that grows with K and V (transformers' [B, 1, 1, S_k], the first
            # keys masked): still one kernel, each step the masked kernel built for its S_k.
            misses = ordo.cache_stats()["misses"]
            masks = [torch.arange(s).view(1, 1, 1, s) >= min(3, s - 1) for s in range(1, 71)]
            outs = [ot.scaled_dot_product_attention(q, keys[:, :, :s].contiguous(), values[:, :, :s].contiguous(), attn_mask=masks[s - 1],
                                                    order=order) for s in range(1, 71)]
            compiled = ordo.cache_stats()["misses"] - misses
            check(compiled <= 1, f"{name} {order}: 70 masked decode steps compiled {compiled} kernel(s)")
            ok = True
            for s in (1, 2, 31, 33, 64, 65, 70):
                additive = torch.zeros(1, 1, 1, s, dtype=dtype).masked_fill_(~masks[s - 1], float("-inf"))
                kernel = ordo._ordo.compile_attention(32, 1, s, name, order, mask=f"{name}:111K")
                want = torch.empty_like(q)
                kernel.run_torch([q, keys[:, :, :s].contiguous(), values[:, :, :s].contiguous(), additive.view(s), want], 4, 0)
                ok &= same(outs[s - 1], want)
            check(ok, f"{name} {order}: every masked decode step has the bits of the masked kernel built for its S_k")
    # The first call also asks for the kernel for every S_k, once, and is refused (a miss too).
    ot.scaled_dot_product_attention(q.float(), keys[:, :, :4].float(), values[:, :, :4].float(), order=EXACT)
    misses = ordo.cache_stats()["misses"]
    for s in (5, 6, 7):
        ot.scaled_dot_product_attention(q.float(), keys[:, :, :s].float(), values[:, :, :s].float(), order=EXACT)
    check(ordo.cache_stats()["misses"] - misses == 3, f"{EXACT}: a kernel per S_k (PyTorch's blocks are fixed by it)")


def test_backward_compiles_once_over_key_lengths():
    """Gradients through ordo.torch's SDPA with a flash order, S_q fixed and S_k varying (a decoder's
    queries against memories of many lengths): one attention_backward kernel for every S_k, each
    step's dq, dk and dv the bits of the kernel built for its S_k alone."""
    import ordo
    import ordo.torch as ot
    g = torch.Generator().manual_seed(8)
    for dtype in (torch.float32, torch.bfloat16):
        q0 = torch.randn(1, 2, 6, 32, generator=g).to(dtype)
        keys, values = torch.randn(1, 2, 45, 32, generator=g).to(dtype), torch.randn(1, 2, 45, 32, generator=g).to(dtype)
        lengths = list(range(1, 46, 2))
        for order in ("fast", "flash"):
            grads, misses = [], []
            for s in lengths:
                misses.append(ordo.cache_stats()["misses"])
                q, k, v = (t.detach().clone().requires_grad_() for t in (q0, keys[:, :, :s], values[:, :, :s]))
                ot.scaled_dot_product_attention(q, k, v, order=order).float().square().sum().backward()
                grads.append((q.grad, k.grad, v.grad))
            # The first length compiles the forward, the forward with lse (the backward runs it
            # again for lse) and the backward, each for every S_k; the other lengths compile nothing.
            later = ordo.cache_stats()["misses"] - misses[1]
            check(misses[1] - misses[0] <= 3 and later == 0,
                  f"{dtype} {order}: the first key length compiled {misses[1] - misses[0]} kernels, the {len(lengths) - 1} others {later}")
            ok = True
            for s, (dq, dk, dv) in zip(lengths, grads):
                if s not in (1, 15, 17, 33, 45):
                    continue
                k, v = keys[:, :, :s].contiguous(), values[:, :, :s].contiguous()
                out, lse = ordo.attention(q0, k, v, order=order, return_lse=True)
                dout = 2 * out.float()
                dout = dout.to(dtype)
                kernel = ordo._ordo.compile_attention(32, 6, s, ordo._dtype_of(q0, None), order, False, None, False, "attention_backward", True)
                want = [torch.empty_like(q0), torch.empty_like(k), torch.empty_like(v)]
                kernel.run_torch([q0, k, v, out, dout, lse, *want], 2, 0)
                ok &= same(dq, want[0]) and same(dk, want[1]) and same(dv, want[2])
            check(ok, f"{dtype} {order}: every length's gradients are the bits of the backward kernel built for its S_k")


def test_runs_on_torch_threads():
    """ordo.torch runs ordo's kernels on torch's OpenMP threads (ordo.set_executor), with the
    bits ordo's own pool gives."""
    import ordo
    import ordo.torch as ot
    check(ordo.executor() == "openmp", f"ordo.torch picked torch's OpenMP threads, got {ordo.executor()}")
    gen = torch.Generator().manual_seed(12)
    x = torch.randn(2048, 1024, generator=gen)
    q, k, v = (torch.randn(2, 8, 256, 64, generator=gen) for _ in range(3))
    def outputs():
        return [ot.layer_norm(x, (1024,), order=EXACT), ot.softmax(x, -1, order="fast"),
                ot.scaled_dot_product_attention(q, k, v, order="fast")]
    on_omp = outputs()
    ordo.set_executor("pool")
    on_pool = outputs()
    ordo.set_executor("openmp")
    check(all(same(a, b) for a, b in zip(on_omp, on_pool)), "torch's threads give the bits of ordo's pool")


def test_varying_lengths_compile_once():
    """Rows of a new length N through ordo.torch compile nothing where the order takes N at launch
    (fast's and torch2.15-cpu's norms and softmax): one kernel per (op, dtype), and every call has
    the bits of the kernel built for its N; torch2.15-cpu's keep torch's own bits."""
    import ordo
    import ordo.torch as ot
    gen = torch.Generator().manual_seed(8)
    lengths = list(range(1000, 1024)) + [1, 7, 8, 9, 33, 4096, 16385]
    for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        xs = {n: (3 * torch.randn(5, n, generator=gen)).to(dtype) for n in lengths}
        ws = {n: (1 + 0.1 * torch.randn(n, generator=gen)).to(dtype) for n in lengths}
        calls = {
            "layer_norm": (lambda x, n: ot.layer_norm(x, (n,), ws[n], ws[n], order="fast"), ["x", "weight", "bias"]),
            "rms_norm": (lambda x, n: ot.rms_norm(x, (n,), ws[n], eps=1e-5, order="fast"), ["x", "weight"]),
            "softmax": (lambda x, n: ot.softmax(x, -1, order="fast"), ["x"]),
            "log_softmax": (lambda x, n: ot.log_softmax(x, -1, order="fast"), ["x"]),
        }
        for op, (call, inputs) in calls.items():
            misses = ordo.cache_stats()["misses"]
            outs = {n: call(xs[n], n) for n in lengths}
            compiled = ordo.cache_stats()["misses"] - misses
            check(compiled <= 1, f"{name} {op}: {len(lengths)} lengths compiled {compiled} kernel(s)")
            ok = True
            for n in (1, 8, 9, 1000, 1017, 16385):
                norm = op in ("layer_norm", "rms_norm")
                kernel = ordo._ordo.compile(op, n, name, name if norm else "", "fast", 1e-5, norm, op == "layer_norm")
                given = {"x": xs[n], "weight": ws[n], "bias": ws[n]}
                tensors = []
                for arg, dt, is_out, extent in kernel.args:
                    if not is_out:
                        tensors.append(given[arg])
                    else:
                        tensors.append(torch.empty((5, n) if extent == "rows*N" else (5,), dtype=dtype))
                kernel.run_torch(tensors, 5, 0)
                ok &= same(outs[n], tensors[len(inputs)])
            check(ok, f"{name} {op}: every length has the bits of the kernel built for it")
    for (op, fn), (dtype, name) in itertools.product((("softmax", F.softmax), ("log_softmax", F.log_softmax)),
                                                     ((torch.float32, "f32"), (torch.bfloat16, "bf16"), (torch.float16, "f16"))):
        misses = ordo.cache_stats()["misses"]
        ok = all(same(getattr(ot, op)(x, -1, order=EXACT), fn(x, -1))
                 for x in ((4 * torch.randn(4, n, generator=gen)).to(dtype) for n in lengths))
        check(ok, f"{EXACT} {name} {op}: torch's bits at every length")
        check(ordo.cache_stats()["misses"] - misses <= 1, f"{EXACT} {name} {op}: one kernel for every length")
    for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        for op, call, want in (("layer_norm", lambda x, w, n: ot.layer_norm(x, (n,), w, w, order=EXACT),
                                lambda x, w, n: F.layer_norm(x, (n,), w, w)),
                               ("rms_norm", lambda x, w, n: ot.rms_norm(x, (n,), w, 1e-6, order=EXACT),
                                lambda x, w, n: F.rms_norm(x, (n,), w, 1e-6))):
            misses = ordo.cache_stats()["misses"]
            ok = True
            for n in lengths:
                x, w = (3 * torch.randn(3, n, generator=gen)).to(dtype), (1 + torch.randn(n, generator=gen) / 10).to(dtype)
                ok &= same(call(x, w, n), want(x, w, n))
            check(ok, f"{EXACT} {name} {op}: torch's bits at every length")
            check(ordo.cache_stats()["misses"] - misses <= 1, f"{EXACT} {name} {op}: one kernel for every length")


def test_blocks_recompile():
    """One compiled function called in blocks of different orders, and outside: Dynamo guards on
    the block, so each runs its own graph."""
    import ordo.torch as ot
    x = torch.randn(16, 1000, generator=torch.Generator().manual_seed(6))
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: F.layer_norm(t, (1000,)), fullgraph=True)
    with torch.no_grad():
        with ot.pinned(EXACT):
            exact = compiled(x)
        with ot.pinned("fast"):
            fast = compiled(x)
        outside = compiled(x)
        with ot.pinned(EXACT):
            again = compiled(x)
        want = F.layer_norm(x, (1000,))
        check(same(exact, want) and same(again, want), "in a torch2.15-cpu block, before and after another block: eager's bits")
        check(same(fast, ot.layer_norm(x, (1000,), order="fast")) and not same(fast, want), "in a fast block: ordo's fast bits")
        check(not same(outside, want), "outside any block: Inductor's own kernel (not eager's bits here)")
    torch._dynamo.reset()


def test_backward():
    """layer_norm's gradients through ordo (pinned, eager and compiled) are eager autograd's bits
    under torch2.15-cpu, on the thread count torch runs; a named backward_order is taken; ops with
    no backward kernel raise, naming the op."""
    import ordo.torch as ot
    for dtype in (torch.float32, torch.bfloat16):
        for name, compiled in (("eager", False), ("compiled", True)):
            torch._dynamo.reset()
            g = torch.Generator().manual_seed(5)
            x0 = (torch.randn(37, 100, generator=g) * 3 + 20).to(dtype)
            dy = torch.randn(37, 100, generator=g).to(dtype)
            grads = []
            for use_ordo in (False, True):
                x = x0.clone().requires_grad_(True)
                ln = nn.LayerNorm(100).to(dtype)
                with torch.no_grad():
                    ln.weight.copy_(torch.linspace(0.5, 1.5, 100))
                    ln.bias.copy_(torch.linspace(-1, 1, 100))
                run = torch.compile(ln, fullgraph=True) if compiled else ln
                if use_ordo:
                    with ot.pinned(EXACT, strict=True):
                        y = run(x)
                else:
                    y = run(x) if not compiled else ln(x)  # eager autograd is the reference
                y.backward(dy)
                grads.append((y, x.grad, ln.weight.grad, ln.bias.grad))
            want, got = grads
            for what, a, b in zip(("y", "x.grad", "weight.grad", "bias.grad"), want, got):
                check(same(a, b), f"layer_norm {name} {dtype}: pinned {what} has eager autograd's bits")
    # backward_order: the gradients of ordo's own batch-invariant order, from a torch2.15 forward.
    x = torch.randn(9, 64, requires_grad=True)
    w = torch.rand(64, requires_grad=True)
    y = ot.layer_norm(x, (64,), w, None, order=EXACT, backward_order="batch-invariant")
    y.backward(torch.ones_like(y))
    _, mean, rstd = torch.native_layer_norm(x.detach(), [64], w.detach(), None, 1e-5)
    import ordo
    dx, dw, _ = ordo.layer_norm_backward(torch.ones_like(y), x.detach(), w.detach(), mean.reshape(-1), rstd.reshape(-1),
                                         order="batch-invariant", bias=False)
    check(same(x.grad, dx) and same(w.grad, dw), "backward_order='batch-invariant': its kernel's bits")
    # softmax and log_softmax through pinned, eager and compiled: eager autograd's x.grad.
    for fn in (torch.softmax, torch.log_softmax):
        for dtype in (torch.float32, torch.bfloat16):
            for compiled in (False, True):
                torch._dynamo.reset()
                g = torch.Generator().manual_seed(7)
                x0 = torch.randn(5, 77, generator=g).to(dtype)
                dy = torch.randn(5, 77, generator=g).to(dtype)
                grads = []
                for use_ordo in (False, True):
                    x = x0.clone().requires_grad_(True)
                    run = torch.compile(lambda t: fn(t, -1), fullgraph=True) if compiled and use_ordo else (lambda t: fn(t, -1))
                    if use_ordo:
                        with ot.pinned(EXACT, strict=True):
                            y = run(x)
                    else:
                        y = run(x)
                    y.backward(dy)
                    grads.append(x.grad)
                check(same(grads[0], grads[1]), f"{fn.__name__} {dtype} {'compiled' if compiled else 'eager'}: pinned x.grad has "
                                                f"eager autograd's bits")
    # rms_norm through pinned (nn.RMSNorm), eager: eager autograd's x.grad and weight.grad.
    for dtype in (torch.float32, torch.bfloat16):
        g = torch.Generator().manual_seed(9)
        x0 = torch.randn(6, 130, generator=g).to(dtype)
        dy = torch.randn(6, 130, generator=g).to(dtype)
        grads = []
        for use_ordo in (False, True):
            x = x0.clone().requires_grad_(True)
            m = nn.RMSNorm(130, eps=1e-6).to(dtype)
            with torch.no_grad():
                m.weight.copy_(torch.linspace(0.5, 1.5, 130))
            if use_ordo:
                with ot.pinned(EXACT, strict=True):
                    y = m(x)
            else:
                y = m(x)
            y.backward(dy)
            grads.append((x.grad, m.weight.grad))
        check(same(grads[0][0], grads[1][0]) and same(grads[0][1], grads[1][1]),
              f"rms_norm {dtype}: pinned x.grad and weight.grad have eager autograd's bits")
    # SDPA: gradients by the tiled backward; a forward order without one is refused by backward().
    q, k, v = (torch.randn(1, 2, 33, 16, requires_grad=True) for _ in range(3))
    out = ot.scaled_dot_product_attention(q, k, v, True, order="fast")
    dout = torch.randn_like(out)
    out.backward(dout)
    dq, dk, dv = ordo.attention_backward(q.detach(), k.detach(), v.detach(), out.detach(), dout, order="fast", causal=True)
    check(same(q.grad, dq) and same(k.grad, dk) and same(v.grad, dv), "sdpa: gradients are ordo's attention_backward, order fast")
    # Under torch2.15-cpu (f32 and bf16), eager autograd's bits, through pinned; where ordo has no
    # model of this host's MKL the backward is refused, saying so.
    for dtype in (torch.float32, torch.bfloat16):
        grads = []
        for use_ordo in (False, True):
            q_, k_, v_ = (t.detach().to(dtype).requires_grad_(True) for t in (q, k, v))
            if use_ordo:
                with ot.pinned(EXACT, strict=True):
                    out = F.scaled_dot_product_attention(q_, k_, v_, is_causal=True)
            else:
                out = F.scaled_dot_product_attention(q_, k_, v_, is_causal=True)
            try:
                out.backward(dout.to(dtype))
            except Exception as e:
                check("host" in str(e), f"sdpa {dtype} under torch2.15-cpu: backward refused only for an unmodelled host ({e})")
                print(f"NOT VERIFIED: sdpa {dtype} backward under torch2.15-cpu on this host:", e)
                grads = None
                break
            grads.append((q_.grad, k_.grad, v_.grad))
        if grads:
            check(all(same(a, b) for a, b in zip(*grads)),
                  f"sdpa {dtype} under torch2.15-cpu: pinned dq, dk, dv have eager autograd's bits")
    torch._dynamo.reset()


def test_eager_kernels():
    """Compiled inside pinned(torch2.15-cpu), ops ordo does not run keep eager's kernels: a chain of
    bf16 pointwise ops and a training dropout equal eager (forward and gradient), where plain
    Inductor fuses the chain in f32 and traces dropout as native_dropout. pinned("fast") and
    eager_kernels=False leave Inductor's own kernels."""
    import torch._inductor.config as inductor_config
    import ordo.torch as ot

    def block(x, w):
        h = F.silu(x @ w) * torch.tanh(x) + torch.exp(-x * 0.5)
        return F.dropout(h, 0.1, training=True)

    torch.manual_seed(0)
    x = torch.randn(37, 96).bfloat16().requires_grad_()
    w = torch.randn(96, 96).bfloat16().requires_grad_()

    def run(fn):
        x.grad = w.grad = None
        torch.manual_seed(7)
        y = fn(x, w)
        y.float().square().sum().backward()
        return y.detach(), x.grad.clone(), w.grad.clone()

    want = run(block)
    torch._dynamo.reset()
    plain = run(torch.compile(block))
    check(not all(same(a, b) for a, b in zip(want, plain)), "negative control: plain compile of the bf16 chain differs from eager")
    for kwargs in ({}, {"strict": True}):
        torch._dynamo.reset()
        with ot.pinned(EXACT, **kwargs):
            got = run(torch.compile(block))
            check(inductor_config.fallback_by_default, f"pinned({EXACT}, {kwargs}) compiles with Inductor's lite mode")
        check(not inductor_config.fallback_by_default, f"pinned({EXACT}, {kwargs}): Inductor's own settings after the block")
        check(all(same(a, b) for a, b in zip(want, got)),
              f"compiled inside pinned({EXACT}, {kwargs}): bf16 pointwise chain and dropout, output and gradients equal eager")
    with ot.pinned(EXACT):
        check(all(same(a, b) for a, b in zip(want, run(block))), f"eager inside pinned({EXACT}): dropout equals eager")

    # Bilinear interpolation: torch's Python decomposition, traced even in lite mode, rounds
    # otherwise; inside the block the call runs eagerly between two graphs, with one warning.
    def upsample(t):
        return F.interpolate(t * 2, scale_factor=1.5, mode="bilinear") + 1

    t = torch.randn(2, 3, 10, 10)
    want = upsample(t)
    torch._dynamo.reset()
    with ot.pinned(EXACT, eager_kernels=False):
        check(not same(want, torch.compile(upsample)(t)), "negative control: bilinear interpolate compiled by Inductor differs")
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as record, ot.pinned(EXACT):
        warnings.simplefilter("always")
        got = torch.compile(upsample)(t)
    messages = fallback_warnings(record)
    check(same(want, got) and len(messages) == 1 and "interpolate runs eagerly" in messages[0],
          f"bilinear interpolate compiled inside pinned({EXACT}): eager's bits, one warning naming it: {messages}")
    torch._dynamo.reset()
    try:
        with ot.pinned(EXACT):
            torch.compile(upsample, fullgraph=True)(t)
        check(False, "bilinear interpolate under fullgraph=True inside pinned raises")
    except Exception as e:  # noqa: BLE001 - Dynamo's own error type for a graph break
        check("eagerly" in str(e), f"bilinear interpolate under fullgraph=True inside pinned reports the break: {str(e)[:100]}")
    check(not inductor_config.fallback_by_default, "lite mode ends with the block")
    for order, kwargs in (("fast", {}), (EXACT, {"eager_kernels": False})):
        with ot.pinned(order, **kwargs):
            check(not inductor_config.fallback_by_default, f"pinned({order!r}, {kwargs}) keeps Inductor's own kernels")
    torch._dynamo.reset()


def test_graphs_run_outside_the_mode():
    """A graph compiled inside pinned runs with torch-function handling off: its ATen calls do not
    pass through the mode one by one (each would be a Python call), and the ordo operators the
    trace routed still run, with eager's bits, in forward and backward."""
    import ordo.torch as ot

    def block(x, w):
        return F.layer_norm(x @ w + 1, (w.shape[-1],)).relu() * 2

    torch.manual_seed(3)
    x, w = torch.randn(9, 40), torch.randn(40, 40)
    with torch.no_grad():
        want = block(x, w)
    seen = []
    original = ot.pinned.__torch_function__

    def counting(self, func, types, args=(), kwargs=None):
        seen.append(func)
        return original(self, func, types, args, kwargs)

    for order in (EXACT, "fast"):
        torch._dynamo.reset()
        with torch.no_grad(), ot.pinned(order):
            compiled = torch.compile(block)
            compiled(x, w)  # traced and compiled: the mode routes layer_norm
            ot.pinned.__torch_function__ = counting
            try:
                got = compiled(x, w)
            finally:
                ot.pinned.__torch_function__ = original
            routed = (ot.layer_norm(x @ w + 1, (40,), order=order).relu() * 2)
        check(not seen, f"pinned({order!r}): a compiled graph's calls bypass the mode ({len(seen)} passed through it)")
        check(same(routed, got), f"pinned({order!r}): the compiled graph runs ordo's layer_norm in that order")
        if order == EXACT:
            check(same(want, got), f"pinned({order!r}): the compiled graph gives eager's bits")
        else:
            check(not same(want, got), f"negative control: pinned({order!r})'s layer_norm is not torch's")
        seen.clear()
    torch._dynamo.reset()


def test_direct_calls():
    """Eager calls with no gradient to record run the kernel without the custom op's dispatch: the
    same bits as the custom op, which still runs when a gradient is needed or a dispatch mode
    watches."""
    import ordo.torch as ot
    g = torch.Generator().manual_seed(7)
    for dt in (torch.float32, torch.bfloat16):
        x = torch.randn(3, 5, 200, generator=g).to(dt)
        w, b = torch.randn(200, generator=g).to(dt), torch.randn(200, generator=g).to(dt)
        q, k, v = (torch.randn(2, 4, 17, 32, generator=g).to(dt) for _ in range(3))
        for order in ("fast", EXACT):
            pairs = [
                ("layer_norm", ot.layer_norm(x, (200,), w, b, order=order), torch.ops.ordo.layer_norm(x, w, b, 1e-5, order, "")[0]),
                ("rms_norm", ot.rms_norm(x, (200,), w, order=order),
                 torch.ops.ordo.rms_norm(x, w, float(torch.finfo(torch.float32).eps), order, "")[0]),
                ("softmax", ot.softmax(x, order=order), torch.ops.ordo.softmax(x, order, "")),
                ("log_softmax", ot.log_softmax(x, order=order), torch.ops.ordo.log_softmax(x, order, "")),
                ("sdpa", ot.scaled_dot_product_attention(q, k, v, True, order=order),
                 torch.ops.ordo.scaled_dot_product_attention(q, k, v, None, True, None, order, "")),
            ]
            for name, direct, op in pairs:
                check(same(direct, op), f"direct {name} equals its custom op ({dt}, {order})")
            # The row ops' direct call (Kernel.run_rows): a non-contiguous input, no rows, and row
            # counts that grow and shrink (its statistics go to memory it keeps and grows).
            for rows in (2, 700, 1, 0, 300):
                xr = torch.randn(200, rows, generator=g).to(dt).t()
                for name, direct, op in (
                        ("layer_norm", ot.layer_norm(xr, (200,), w, b, order=order), torch.ops.ordo.layer_norm(xr.contiguous(), w, b, 1e-5, order, "")[0]),
                        ("rms_norm", ot.rms_norm(xr, (200,), None, 1e-6, order=order), torch.ops.ordo.rms_norm(xr.contiguous(), None, 1e-6, order, "")[0]),
                        ("softmax", ot.softmax(xr, order=order), torch.ops.ordo.softmax(xr.contiguous(), order, ""))):
                    check(same(direct, op) and direct.is_contiguous(), f"direct {name} of a transposed {rows}x200 ({dt}, {order})")
        with torch.autograd.profiler.profile() as prof:
            ot.layer_norm(x, (200,), w, b, order="fast")
        names = [e.name for e in prof.function_events]
        check(any(n.startswith("aten::empty") for n in names) and not any(n.startswith("ordo::") for n in names),
              f"an eager call with no gradient skips the custom op ({dt}): {sorted(set(names))}")
        # A module's weights are nn.Parameters (requiring grad): under no_grad they take the direct
        # path too, with the custom op's bits.
        ln = nn.LayerNorm(200, dtype=dt)
        with torch.no_grad():
            ln.weight.copy_(w), ln.bias.copy_(b)
            with torch.autograd.profiler.profile() as prof:
                direct = ot.layer_norm(x, (200,), ln.weight, ln.bias, order=EXACT)
            names = [e.name for e in prof.function_events]
            check(same(direct, torch.ops.ordo.layer_norm(x, w, b, 1e-5, EXACT, "")[0]) and not any(n.startswith("ordo::") for n in names),
                  f"nn.LayerNorm's parameters under no_grad: the direct call, the custom op's bits ({dt})")
        with OpLog() as log:
            ot.layer_norm(x, (200,), w, b, order="fast")
        check(any(n.startswith("ordo.layer_norm") for n in log.names), f"under a dispatch mode the custom op runs ({dt})")
        xg = x.detach().requires_grad_()
        y = ot.layer_norm(xg, (200,), w, b, order="fast")
        check(y.grad_fn is not None, f"a call that needs a gradient records one ({dt})")


def check_pinned_sdpa(name, sdpa, q, k, v, dout):
    """sdpa(q, k, v) (an F.scaled_dot_product_attention call) inside pinned(EXACT, strict=True,
    kernels="ordo") runs ordo's attention, and with gradients its backward, in eager and compiled
    code, giving torch's output and, for dout, torch's dq, dk and dv."""
    import ordo.torch as ot
    with torch.no_grad():
        want = sdpa(q, k, v)
        torch._dynamo.reset()
        with ot.pinned(EXACT, strict=True, kernels="ordo"), OpLog() as log:
            got = sdpa(q, k, v)
            compiled = torch.compile(sdpa)(q, k, v)
    ran = [n for n in log.names if "ordo" in n or "attention" in n]
    check(all("ordo" in n for n in ran) and ran, f"{name}: pinned runs ordo's attention, not torch's: {ran[:3]}")
    check(same(want, got) and same(want, compiled), f"{name}: pinned eager and compiled equal torch")

    def step(fn):  # output and the three gradients of fn on leaf copies of q, k, v
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        out = fn(*leaves)
        out.backward(dout)
        return [out.detach()] + [t.grad for t in leaves]

    want = step(sdpa)
    torch._dynamo.reset()
    with ot.pinned(EXACT, strict=True, kernels="ordo"), OpLog() as log:
        got = step(sdpa)
        compiled = step(torch.compile(sdpa))
    ran = [n for n in log.names if "attention" in n]
    check(any("ordo" in n and "backward" in n for n in ran) and all("ordo" in n for n in ran),
          f"{name} with gradients: pinned runs ordo's attention and its backward: {ran[:4]}")
    check(all(same(w, x) for w, x in zip(want, got)) and all(same(w, c) for w, c in zip(want, compiled)),
          f"{name} with gradients: pinned eager and compiled give torch's output, dq, dk and dv")


def test_attention_mask():
    """SDPA with an attn_mask (torch's flash kernel adds it: fma(q.k, scale, mask) forward, after
    the product's scale backward): boolean masks as transformers builds them for a left-padded
    batch (fully masked rows included) and float masks, every way of broadcasting torch's flash
    kernel takes, grouped-query too. pinned runs ordo's kernels, in eager and compiled code, with
    eager's bits: the output without gradients, and the output and every gradient with them."""
    import ordo.torch as ot
    for dtype in (torch.float32, torch.bfloat16):
        for b, heads, kv_heads, s, d, kind in ((2, 4, 2, 48, 32, "left_pad"), (2, 2, 2, 37, 64, "bool"), (1, 4, 1, 70, 32, "float"),
                                               (3, 2, 2, 1, 64, "keys"), (2, 3, 3, 20, 32, "float2d")):
            g = torch.Generator().manual_seed(1)
            q = torch.randn(b, s, heads, d, dtype=dtype, generator=g).transpose(1, 2)
            k = torch.randn(b, s + 3, kv_heads, d, dtype=dtype, generator=g).transpose(1, 2)
            v = torch.randn(b, s + 3, kv_heads, d, dtype=dtype, generator=g).transpose(1, 2)
            dout = torch.randn(b, heads, s, d, dtype=dtype, generator=g)
            keys = torch.arange(s + 3).view(1, 1, 1, -1)
            if kind == "left_pad":  # causal, bottom-right aligned, batch i's first 5i keys padding
                mask = (keys <= torch.arange(s).view(1, 1, -1, 1) + 3) & (keys >= 5 * torch.arange(b).view(-1, 1, 1, 1))
            elif kind == "bool":
                mask = torch.rand(b, heads, s, s + 3, generator=g) > 0.3
            elif kind == "keys":  # [B, 1, 1, S_k]: one row of keys per batch
                mask = keys >= torch.arange(b).view(-1, 1, 1, 1)
            else:
                mask = (torch.randn((1, 1, s, s + 3) if kind == "float" else (s, s + 3), generator=g) * 3).to(dtype)
            name = f"mask {kind} {tuple(mask.shape)} {dtype} B={b} H={heads}/{kv_heads} S={s} D={d}"

            def sdpa(q_, k_, v_):
                return F.scaled_dot_product_attention(q_, k_, v_, attn_mask=mask, enable_gqa=True)

            check_pinned_sdpa(name, sdpa, q, k, v, dout)
    # A mask that requires grad: ordo gives it none, so ordo.torch refuses it by name (pinned routes
    # it to torch, whose math path runs it).
    try:
        ot.scaled_dot_product_attention(q, k, v, attn_mask=mask.float().requires_grad_(), enable_gqa=True, order=EXACT)
        check(False, "a mask that requires grad raises")
    except ValueError as e:
        check("attn_mask requires grad" in str(e), f"a mask that requires grad raises, naming it: {e}")
    # The composite's order has no mask: pinned runs torch's kernel there, with one warning naming why.
    with warnings.catch_warnings(record=True) as record, torch.no_grad(), ot.pinned("torch2.15-cpu-math"):
        warnings.simplefilter("always")
        got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    messages = fallback_warnings(record)
    check(same(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True), got) and len(messages) == 1 and
          "has no attention mask" in messages[0], f"a mask under pinned('torch2.15-cpu-math'): torch's kernel, one warning naming why: "
                                                  f"{messages}")
    # The flash orders add it to their scores (no reference; their error is bounded in
    # reference_flash_bounds): pinned('fast') runs ordo's kernels, forward and backward.
    leaves = [t.detach().float().clone().requires_grad_() for t in (q, k, v)]
    float_mask = mask.float() if mask.dtype != torch.bool else mask
    torch._dynamo.reset()
    with ot.pinned("fast", strict=True), OpLog() as log:
        out = F.scaled_dot_product_attention(*leaves, attn_mask=float_mask, enable_gqa=True)
        out.backward(torch.ones_like(out))
    want = F.scaled_dot_product_attention(*(t.detach().double() for t in leaves), attn_mask=float_mask.double(), enable_gqa=True)
    ran = [n for n in log.names if "attention" in n]
    check(any("ordo" in n and "backward" in n for n in ran) and all("ordo" in n for n in ran) and
          float((out.double() - want).abs().max()) < 1e-5 and all(t.grad.isfinite().all() for t in leaves),
          f"a mask under pinned('fast'): ordo's attention and its backward, within 1e-5 of float64: {ran[:4]}")


def test_grouped_query_attention():
    """SDPA with fewer key/value heads than query heads (enable_gqa=True), on transformers' layout
    (projections [B, S, H, D] viewed as [B, H, S, D]): pinned runs ordo's kernels, in eager and
    compiled code, with eager's bits: the output without gradients, and with them the output and
    every gradient (torch's flash backward sums dk and dv over each group in one chain, as ordo's
    torch2.15-cpu attention_backward does). An exact order that does not model that chain
    (torch2.15-cpu-math) refuses the gradients by name."""
    import ordo.torch as ot
    for dtype in (torch.float32, torch.bfloat16):
        for b, heads, kv_heads, s, d, causal in ((2, 4, 2, 48, 32, True), (1, 8, 2, 100, 64, False), (2, 4, 1, 37, 64, True),
                                                 (1, 6, 3, 1, 64, False), (1, 4, 1, 70, 32, False)):
            torch.manual_seed(0)
            q = torch.randn(b, s, heads, d, dtype=dtype).transpose(1, 2)
            k = torch.randn(b, s, kv_heads, d, dtype=dtype).transpose(1, 2)
            v = torch.randn(b, s, kv_heads, d, dtype=dtype).transpose(1, 2)
            dout = torch.randn(b, heads, s, d, dtype=dtype)
            name = f"GQA {dtype} B={b} H={heads}/{kv_heads} S={s} D={d} causal={causal}"

            def sdpa(q_, k_, v_):
                return F.scaled_dot_product_attention(q_, k_, v_, is_causal=causal, enable_gqa=True)

            check_pinned_sdpa(name, sdpa, q, k, v, dout)
    # One key/value head without enable_gqa (Falcon's multi-query attention): torch broadcasts it,
    # with enable_gqa's bits; pinned runs it as one group.
    for dtype in (torch.float32, torch.bfloat16):
        torch.manual_seed(1)
        q1, k1, v1 = (torch.randn(2, h, 33, 32, dtype=dtype) for h in (4, 1, 1))
        mask = torch.ones(33, 33, dtype=torch.bool).tril().expand(2, 1, 33, 33)
        check_pinned_sdpa(f"one broadcast K/V head {dtype} with a mask", lambda q_, k_, v_: F.scaled_dot_product_attention(q_, k_, v_, attn_mask=mask),
                          q1, k1, v1, torch.randn(2, 4, 33, 32, dtype=dtype))
    q.requires_grad_()
    # A backward_order that cannot sum a group (fast) under an exact forward: torch's kernel, one
    # warning naming why; strict=True raises.
    want = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    with warnings.catch_warnings(record=True) as record, ot.pinned(EXACT, backward_order="fast", kernels="ordo"):
        warnings.simplefilter("always")
        got = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    messages = fallback_warnings(record)
    check(same(want, got) and len(messages) == 1 and "grouped-query" in messages[0],
          f"GQA with gradients, backward_order='fast': torch's kernel, one warning naming why: {messages}")
    try:
        with ot.pinned(EXACT, backward_order="fast", strict=True, kernels="ordo"):
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        check(False, "GQA with gradients, backward_order='fast', strict=True raises")
    except ValueError as e:
        check("grouped-query" in str(e), f"GQA with gradients, backward_order='fast', strict=True raises: {str(e)[:120]}")
    try:
        ot.scaled_dot_product_attention(q, k, v, enable_gqa=True, order="torch2.15-cpu-math")
        check(False, "GQA with gradients under torch2.15-cpu-math raises")
    except ValueError as e:
        check("grouped-query" in str(e), f"GQA with gradients under torch2.15-cpu-math raises ValueError: {str(e)[:160]}")
    torch._dynamo.reset()


def test_sum_and_mean():
    """ordo.torch.sum and mean over the last dim under torch2.15-cpu: torch's bits for the value
    (f32 sums; f32, bf16 and f16 means; a single row over 32768 that torch splits between its
    threads), eager autograd's for the gradient, in eager code (with and without a gradient to
    record) and compiled; the sum of 16-bit rows is refused with its reason."""
    import ordo.torch as ot
    order = f"{EXACT}(threads={torch.get_num_threads()})"
    g = torch.Generator().manual_seed(11)
    for name, dt, shape, keepdim in (("sum", torch.float32, (3, 5, 200), False), ("sum", torch.float32, (40000,), True),
                                     ("mean", torch.float32, (7, 4097), True), ("mean", torch.bfloat16, (3, 5, 200), False),
                                     ("mean", torch.float16, (2, 33), False), ("mean", torch.bfloat16, (40000,), False)):
        x = (3 * torch.randn(shape, generator=g) + 0.5).to(dt)
        want = getattr(x, name)(-1, keepdim=keepdim)
        with torch.no_grad():
            direct = getattr(ot, name)(x, keepdim=keepdim, order=order)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        got = getattr(ot, name)(xa, -1, keepdim, order=order)
        dy = torch.randn(want.shape, generator=g).to(dt)
        got.backward(dy)
        getattr(xb, name)(-1, keepdim=keepdim).backward(dy)
        compiled = torch.compile(lambda t: getattr(ot, name)(t, -1, keepdim, order=order), fullgraph=True)(x)
        check(same(direct, want) and same(got, want) and same(compiled, want) and same(xa.grad, xb.grad),
              f"ordo.torch.{name} {tuple(shape)} {dt} keepdim={keepdim}: torch's value (eager, no grad, compiled) and gradient")
    try:
        ot.sum(torch.ones(4, 8, dtype=torch.bfloat16), order=order)
        check(False, "the torch2.15 sum of bf16 rows is refused")
    except ValueError as e:
        check("has sum for x of f32 only, not bf16" in str(e), f"the torch2.15 sum of bf16 rows is refused: {str(e)[:100]}")
    torch._dynamo.reset()


def test_pointwise():
    """ordo.torch.silu and ordo.torch.gelu (both forms) under torch2.15-cpu(threads=T): torch's bits
    for the value (eager with and without a gradient to record, compiled) and for the gradient, in
    f32, bf16 and f16 (gelu's erf form in the 16-bit types this host's oneDNN takes; refused by name
    in the others), on launches torch cuts into per-thread chunks (80000 elements; the tanh form's
    forward splits from 16385) and on short ones. Inside pinned, F.silu and F.gelu run ordo's
    operators, forward and backward, eager and compiled, with eager's bits, also over the first half
    of each row of a wider tensor (torch's loop per row: inner_loop=row); the calls torch computes
    otherwise (other strides, one element for the erf form, inplace) fall back with a warning."""
    import ordo.torch as ot
    order = f"{EXACT}(threads={torch.get_num_threads()})"
    ops = {"silu": (lambda t, **kw: ot.silu(t, **kw), F.silu),
           "gelu_tanh": (lambda t, **kw: ot.gelu(t, "tanh", **kw), lambda t: F.gelu(t, approximate="tanh")),
           "gelu": (lambda t, **kw: ot.gelu(t, **kw), F.gelu)}
    g = torch.Generator().manual_seed(17)
    compared = 0
    for name, (ours, theirs) in ops.items():
        for dt in (torch.float32, torch.bfloat16, torch.float16):
            for shape in ((3, 7, 33), (2, 40000), (1, 20001)):
                x = (4 * torch.randn(shape, generator=g)).to(dt)
                dy = torch.randn(shape, generator=g).to(dt)
                xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
                try:
                    got = ours(xa, order=order)
                except ValueError as e:  # gelu's erf form in a 16-bit type oneDNN does not take on this host
                    check(name == "gelu" and dt != torch.float32 and "not modelled" in str(e),
                          f"ordo.torch {name} {dt} refused by name only where the host's model lacks it: {e}")
                    continue
                want = theirs(xb)
                got.backward(dy)
                want.backward(dy)
                with torch.no_grad():
                    direct = ours(x, order=order)
                torch._dynamo.reset()
                compiled = torch.compile(lambda t: ours(t, order=order), fullgraph=True)(x)
                check(same(got, want) and same(direct, want) and same(compiled, want) and same(xa.grad, xb.grad),
                      f"ordo.torch {name} {tuple(shape)} {dt}: torch's value (eager, no grad, compiled) and gradient")
                compared += 1
    check(compared >= 3 * 3 + 2 * 3 + 3, f"ordo.torch's activations compared in {compared} (op, dtype, shape) cases")
    try:
        ot.gelu(torch.ones(4), "sigmoid", order=order)
        check(False, "ordo.torch.gelu refuses approximate='sigmoid'")
    except ValueError as e:
        check("approximate='sigmoid'" in str(e), f"ordo.torch.gelu refuses an unknown form by name: {e}")

    # pinned routes F.silu and both forms of F.gelu: eager and compiled, with the gradient.
    acts = {"silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}
    for (name, act), dt, compiled in itertools.product(acts.items(), (torch.float32, torch.bfloat16), (False, True)):
        x = (3 * torch.randn(2, 9, 40, generator=g)).to(dt)
        ref = x.clone().requires_grad_()
        want = act(ref)
        dy = torch.randn(want.shape, generator=g).to(dt)
        want.backward(dy)
        torch._dynamo.reset()
        xo = x.clone().requires_grad_()
        with OpLog() as log, ot.pinned(EXACT, kernels="ordo", strict=True):
            # The compiled function has an op of its own after the activation (a graph of one custom op
            # is the op itself); times one keeps every bit, -0 included.
            got = (torch.compile(lambda t: act(t) * 1) if compiled else act)(xo)
            got.backward(dy)
        ran = set(log.names)
        check(same(got, want) and same(xo.grad, ref.grad) and f"ordo.{name}.default" in ran and f"ordo.{name}_backward.default" in ran,
              f"pinned, {'compiled' if compiled else 'eager'}: {name} {dt} runs ordo's {name} and {name}_backward with eager's bits "
              f"(ran {sorted(n for n in ran if n.startswith('ordo.'))})")
    # A strided chunk of a wider tensor (Phi-3's gate): torch loops over each row; pinned runs the
    # order with inner_loop=row, forward and backward, eager and compiled.
    for (name, act), dt, compiled in itertools.product((("silu", F.silu), ("gelu_tanh", acts["gelu_tanh"])), (torch.float32, torch.bfloat16),
                                                      (False, True)):
        wide = (3 * torch.randn(3, 37, 2 * 100, generator=g)).to(dt)
        ref = wide.clone().requires_grad_()
        want = act(ref[..., :100])
        dy = torch.randn(want.shape, generator=g).to(dt)
        want.backward(dy)
        torch._dynamo.reset()
        mine = wide.clone().requires_grad_()
        with OpLog() as log, ot.pinned(EXACT, kernels="ordo", strict=True):
            got = (torch.compile(lambda t: act(t.chunk(2, dim=-1)[0]) * 1) if compiled else lambda t: act(t[..., :100]))(mine)
            got.backward(dy)
        check(same(got, want) and same(mine.grad, ref.grad) and f"ordo.{name}.default" in set(log.names),
              f"pinned, {'compiled' if compiled else 'eager'}: {name} {dt} of the first half of each row runs ordo's kernel with "
              f"eager's bits, value and gradient")
    for text, call in (("not contiguous", lambda: F.gelu(torch.randn(40, 8).t())), ("single element", lambda: F.gelu(torch.randn(1))),
                       ("not rows of a wider tensor", lambda: F.silu(torch.randn(40, 8).t())),
                       ("inplace=True", lambda: F.silu(torch.randn(8, 8), inplace=True))):
        with warnings.catch_warnings(record=True) as record, ot.pinned(EXACT, kernels="ordo"):
            warnings.simplefilter("always")
            call()
        check(any(text in w for w in fallback_warnings(record)), f"pinned: an activation torch computes otherwise ({text}) runs "
              f"torch's, with a warning: {fallback_warnings(record)}")
    torch._dynamo.reset()


def test_cross_entropy():
    """ordo.torch.cross_entropy under torch2.15-cpu: torch's loss and gradient for each reduction,
    ignore_index -100 and a class index, f32, bf16 and f16 logits, in eager code (with and without a
    gradient to record) and compiled; inside pinned, F.cross_entropy as transformers calls it
    (logits upcast to f32) runs ordo's operators, forward and backward, eager and compiled, with
    eager's bits. Class weights, label smoothing and out-of-range targets are refused by name, and
    pinned falls back to torch for them with a warning."""
    import ordo.torch as ot
    order = f"{EXACT}(threads={torch.get_num_threads()})"
    g = torch.Generator().manual_seed(23)
    for dt, (rows, classes), reduction, ignore in ((torch.float32, (300, 1000), "mean", -100), (torch.bfloat16, (17, 33), "sum", -100),
                                                    (torch.float16, (40, 129), "none", 0), (torch.float32, (1, 7), "mean", 0)):
        x = (3 * torch.randn(rows, classes, generator=g)).to(dt)
        t = torch.randint(0, classes, (rows,), generator=g)
        t[::4] = ignore
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        got = ot.cross_entropy(xa, t, ignore_index=ignore, reduction=reduction, order=order)
        want = F.cross_entropy(xb, t, ignore_index=ignore, reduction=reduction)
        dy = torch.randn(want.shape, generator=g).to(dt)
        got.backward(dy)
        want.backward(dy)
        with torch.no_grad():
            direct = ot.cross_entropy(x, t, ignore_index=ignore, reduction=reduction, order=order)
        torch._dynamo.reset()
        compiled = torch.compile(lambda a, b: ot.cross_entropy(a, b, ignore_index=ignore, reduction=reduction, order=order),
                                 fullgraph=True)(x, t)
        check(same(got, want) and same(direct, want) and same(compiled, want) and same(xa.grad, xb.grad),
              f"ordo.torch.cross_entropy ({rows}, {classes}) {dt} {reduction} ignore_index={ignore}: torch's loss (eager, no grad, "
              f"compiled) and gradient")

    def loss(logits, labels):  # transformers' causal-LM loss, as ForCausalLMLoss computes it
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100)

    logits = torch.randn(2, 9, 50, generator=g).to(torch.bfloat16)
    labels = torch.randint(0, 50, (2, 9), generator=g)
    labels[0, :3] = -100
    ref = logits.clone().requires_grad_()
    want = loss(ref, labels)
    want.backward()
    for compiled in (False, True):
        torch._dynamo.reset()
        x = logits.clone().requires_grad_()
        with OpLog() as log, ot.pinned(EXACT, kernels="ordo", strict=True):
            got = (torch.compile(loss) if compiled else loss)(x, labels)
            got.backward()
        ran = set(log.names)
        check(same(got, want) and same(x.grad, ref.grad) and "ordo.cross_entropy.default" in ran and
              "ordo.cross_entropy_backward.default" in ran,
              f"pinned, {'compiled' if compiled else 'eager'}: transformers' loss runs ordo's cross_entropy and its backward with "
              f"eager's loss and gradient")
    for kwargs, text in (({"label_smoothing": 0.1}, "label_smoothing=0.1"), ({"weight": torch.ones(50)}, "class weights")):
        try:
            ot.cross_entropy(logits.float().view(-1, 50), labels.view(-1), order=order, **kwargs)
            check(False, f"ordo.torch.cross_entropy refuses {text}")
        except ValueError as e:
            check(text in str(e), f"ordo.torch.cross_entropy refuses {text}: {e}")
        with warnings.catch_warnings(record=True) as record, ot.pinned(EXACT, kernels="ordo"):
            warnings.simplefilter("always")
            fell_back = F.cross_entropy(logits.float().view(-1, 50), labels.view(-1), **kwargs)
        check(same(fell_back, F.cross_entropy(logits.float().view(-1, 50), labels.view(-1), **kwargs)) and
              any(text in w for w in fallback_warnings(record)), f"pinned: cross_entropy with {text} runs torch's, with a warning")
    empty, none_ = torch.empty(0, 50), torch.empty(0, dtype=torch.int64)
    check(all(same(ot.cross_entropy(empty, none_, reduction=r, order=order), F.cross_entropy(empty, none_, reduction=r))
              for r in ("mean", "sum", "none")),
          "an empty batch: torch's loss (mean NaN, sum 0, none empty); the loss stage runs on a launch of no rows")
    try:
        ot.cross_entropy(logits.float().view(-1, 50), torch.full((18,), 50), order=order)
        check(False, "ordo.torch.cross_entropy refuses a target out of range")
    except ValueError as e:
        check("target 50 is out of bounds" in str(e), f"ordo.torch.cross_entropy refuses a target out of range: {e}")
    torch._dynamo.reset()


def main():
    if torch.__version__.split("+")[0] != WANT_TORCH:
        print(f"FAIL: this is torch {torch.__version__} ({sys.executable}); ordo.torch is checked against {WANT_TORCH} "
              f"(scripts/torch2-venv --python)")
        return 1
    # Every test_ function of this file, in the order they are defined: a new test cannot be left
    # out of the run.
    tests = [f for name, f in globals().items() if name.startswith("test_") and callable(f)]
    for test in tests:
        print(f"--- {test.__name__}", flush=True)
        test()
    print(f"\n{len(failures)} failed" if failures else "\nall passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
