#!/usr/bin/env python3
"""A Hugging Face causal LM, compiled, with eager's bits: torch.compile inside ordo.torch.pinned.

    PYTHONPATH=build/python "$(scripts/torch2-venv --python)" examples/hf_parity.py --family llama
    ... --family gpt2,qwen2 --dtype f32 --threads 1 --kv-heads 1 --pad 5

Each family is built from a small config with random weights (nothing is downloaded), then run
three ways, for a forward pass (eval mode, no grad: the logits) and a training step (train mode,
`model(ids, labels=labels, attention_mask=mask).loss.backward()`: every parameter's gradient):

  eager     the model as PyTorch runs it, op by op: the reference
  compiled  torch.compile(model) with its defaults: Inductor's generated kernels
  pinned    the same torch.compile called inside ordo.torch.pinned(order): ordo's kernels run
            the norms, softmax and attention torch's functions reach; with a torch2.15-cpu
            order every other op stays the ATen call eager makes (Inductor's lite mode)

It prints how many logits and gradient elements differ from eager in their bits, the median time
of a forward pass and of a training step, and every OrdoFallbackWarning (what ran as torch
computes it instead of in ordo). With an order that reproduces eager PyTorch 2.15 (the default),
the program fails (exit 1) unless pinned equals eager in every bit of both.

--pad P left-pads the batch: row i starts with P*i pad tokens that the attention mask hides and
the labels ignore (-100), as a tokenizer pads for generation. --seed changes the weights and
tokens. Dropout stays as each config sets it (GPT-2's is 0.1): every variant's training step
starts from the same RNG state.
"""
import argparse
import collections
import os
import statistics
import sys
import tempfile
import time
import warnings

# Inductor's cache key omits ATEN_CPU_CAPABILITY: a fresh cache per process never reuses code
# compiled for another capability.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="ordo_hf_parity_"))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import ordo.torch  # noqa: E402

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def make_model(family, args, dtype):
    """A causal LM of `family` (a transformers model type) at the sizes given, random weights."""
    from transformers import AutoConfig, AutoModelForCausalLM
    sizes = dict(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
                 num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                 max_position_embeddings=max(256, args.seq), pad_token_id=0, bos_token_id=1, eos_token_id=2)
    if args.head_dim:
        sizes["head_dim"] = args.head_dim
    config = AutoConfig.for_model(family, **sizes)
    config._attn_implementation = "sdpa"
    torch.manual_seed(args.seed)
    return AutoModelForCausalLM.from_config(config).to(dtype)


def make_batch(args):
    """Token ids, the attention mask (None without padding) and the labels (-100 on padding)."""
    g = torch.Generator().manual_seed(args.seed + 1)
    ids = torch.randint(3, args.vocab, (args.batch, args.seq), generator=g)
    if not args.pad:
        return ids, None, ids
    mask = torch.ones(args.batch, args.seq, dtype=torch.long)
    for row in range(args.batch):
        pad = min(args.pad * row, args.seq - 1)
        ids[row, :pad] = 0
        mask[row, :pad] = 0
    return ids, mask, ids.masked_fill(mask == 0, -100)


def differing(a, b):
    """Elements whose bit patterns differ (any NaN equals any NaN)."""
    view = torch.int16 if a.element_size() == 2 else torch.int32
    ia, ib = a.detach().contiguous().view(view), b.detach().contiguous().view(view)
    return int(((ia != ib) & ~(a.isnan() & b.isnan())).sum())


def median_ms(fn, repeats):
    """The median time of `repeats` calls (0.0 for none: a run that checks bits only)."""
    if not repeats:
        return 0.0
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - t))
    return statistics.median(times)


class OrdoOps(TorchDispatchMode):
    """Counts the ordo operators that run (the kernels pinned routed), by name."""

    def __init__(self):
        super().__init__()
        self.counts = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name.startswith("ordo."):
            self.counts[name.split(".")[1]] += 1
        return func(*args, **(kwargs or {}))


def run_variant(model, runner, batch, args):
    """(logits, gradients, forward ms, training-step ms, the ordo ops of one forward pass and of
    one training step) of one way of running the model."""
    ids, mask, labels = batch
    model.eval()
    with torch.no_grad():
        logits = runner(ids, attention_mask=mask).logits
        forward_ms = median_ms(lambda: runner(ids, attention_mask=mask), args.repeats)
        with OrdoOps() as forward_ops:
            runner(ids, attention_mask=mask)
    model.train()

    def step():
        model.zero_grad(set_to_none=True)
        torch.manual_seed(args.seed + 2)  # dropout draws the same mask in every variant
        runner(ids, attention_mask=mask, labels=labels).loss.backward()

    step()
    grads = [p.grad.clone() for p in model.parameters()]
    step_ms = median_ms(step, args.repeats)  # as many steps as forward passes: a step median of a few calls is noise
    with OrdoOps() as step_ops:
        step()
    return logits, grads, forward_ms, step_ms, forward_ops.counts, step_ops.counts


def compare(family, dtype_name, args):
    dtype = DTYPES[dtype_name]
    model = make_model(family, args, dtype)
    batch = make_batch(args)
    eager = run_variant(model, model, batch, args)
    torch._dynamo.reset()
    dynamic = getattr(args, "dynamic", False) or None  # None: torch.compile's default (automatic dynamic shapes)
    plain = run_variant(model, torch.compile(model, dynamic=dynamic), batch, args) if args.compiled else None
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ordo.torch.OrdoFallbackWarning)
        with ordo.torch.pinned(args.order, strict=args.strict, kernels=getattr(args, "kernels", "fastest")):
            pinned = run_variant(model, torch.compile(model, dynamic=dynamic), batch, args)
    torch._dynamo.reset()
    fallbacks = sorted({str(w.message) for w in caught if issubclass(w.category, ordo.torch.OrdoFallbackWarning)})
    row = {"family": family, "dtype": dtype_name, "logits": eager[0].numel(),
           "grads": sum(g.numel() for g in eager[1]), "fallbacks": fallbacks,
           "ordo_forward": pinned[4], "ordo_step": pinned[5],
           # the MLP's activation, as transformers names it (Gemma's config calls it hidden_activation)
           "activation": getattr(model.config, "hidden_activation", None) or getattr(model.config, "hidden_act", None)}
    for name, variant in (("eager", eager), ("plain", plain), ("pinned", pinned)):
        if variant is None:  # not run: counts and times print as '-'
            row[f"{name}_logits"] = row[f"{name}_grads"] = row[f"{name}_fwd_ms"] = row[f"{name}_step_ms"] = None
            continue
        row[f"{name}_logits"] = differing(eager[0], variant[0])
        row[f"{name}_grads"] = sum(differing(a, b) for a, b in zip(eager[1], variant[1]))
        row[f"{name}_fwd_ms"], row[f"{name}_step_ms"] = variant[2], variant[3]
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default="llama",
                    help="transformers model types, comma-separated (llama, qwen2, gemma, phi3, gpt2, mistral, ...)")
    ap.add_argument("--dtype", default="f32,bf16", help="f32, bf16 or both (comma-separated)")
    ap.add_argument("--order", default="torch2.15-cpu", help="the order pinned runs (default: eager PyTorch 2.15's)")
    ap.add_argument("--strict", action="store_true", help="pinned(strict=True): a call ordo cannot run is an error")
    ap.add_argument("--kernels", default="fastest", choices=("fastest", "ordo"),
                    help="pinned(kernels=...): 'fastest' runs torch's own kernel where it gives the order's bits and is "
                         "faster (measured); 'ordo' runs ordo's kernel for every call it can")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch's thread count")
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--intermediate", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2, help="key/value heads (grouped-query attention below --heads)")
    ap.add_argument("--head-dim", type=int, default=0, help="per-head size where the family takes one (0: hidden/heads)")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=48)
    ap.add_argument("--pad", type=int, default=0, help="left padding: row i starts with pad*i masked tokens")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=10, help="timed forward passes and training steps per variant (0: no timing)")
    ap.add_argument("--dynamic", action="store_true", help="torch.compile(dynamic=True): sizes symbolic where ordo allows")
    ap.add_argument("--no-compiled", dest="compiled", action="store_false",
                    help="skip plain torch.compile (Inductor's code generation takes most of a run)")
    args = ap.parse_args()
    for name, value, low in (("threads", args.threads, 1), ("vocab", args.vocab, 4), ("hidden", args.hidden, 1),
                             ("layers", args.layers, 1), ("heads", args.heads, 1), ("kv-heads", args.kv_heads, 1),
                             ("batch", args.batch, 1), ("seq", args.seq, 1), ("pad", args.pad, 0),
                             ("repeats", args.repeats, 0), ("head-dim", args.head_dim, 0)):
        if value < low:
            ap.error(f"--{name} {value}: must be at least {low}")
    if args.heads % args.kv_heads:
        ap.error(f"--kv-heads {args.kv_heads} does not divide --heads {args.heads}")
    dtypes = args.dtype.split(",")
    for d in dtypes:
        if d not in DTYPES:
            ap.error(f"--dtype {d}: ordo's models run {', '.join(DTYPES)}")
    torch.set_num_threads(args.threads)
    exact = args.order.startswith("torch2.15-cpu") and torch.__version__.startswith("2.15.")
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.get_num_threads()} threads, "
          f"capability {torch.backends.cpu.get_cpu_capability()}; hidden {args.hidden}, {args.layers} layers, "
          f"{args.heads} heads ({args.kv_heads} kv), batch {args.batch}x{args.seq}, left pad {args.pad}; "
          f"pinned order {args.order}")
    warnings.filterwarnings("ignore", message=".*token_id.*")  # transformers' notes on the small vocabulary
    rows = [compare(family, d, args) for family in args.family.split(",") for d in dtypes]

    print("\ndiffering from eager: logits (forward) and gradient elements (training step); median times in ms")
    print(f"  {'family':<10}{'dtype':<6}{'logits':>8}{'compiled':>10}{'pinned':>8}{'grads':>9}{'compiled':>10}"
          f"{'pinned':>8}   {'fwd eager':>9}{'compiled':>9}{'pinned':>8}   {'step eager':>10}{'compiled':>9}{'pinned':>8}")
    def cell(value, width, ms=False):
        text = "-" if value is None else (f"{value:.2f}" if ms else str(value))
        return f"{text:>{width}}"

    for r in rows:
        print(f"  {r['family']:<10}{r['dtype']:<6}{r['logits']:>8}{cell(r['plain_logits'], 10)}{cell(r['pinned_logits'], 8)}"
              f"{r['grads']:>9}{cell(r['plain_grads'], 10)}{cell(r['pinned_grads'], 8)}   "
              f"{cell(r['eager_fwd_ms'], 9, True)}{cell(r['plain_fwd_ms'], 9, True)}{cell(r['pinned_fwd_ms'], 8, True)}   "
              f"{cell(r['eager_step_ms'], 10, True)}{cell(r['plain_step_ms'], 9, True)}{cell(r['pinned_step_ms'], 8, True)}")
    print("\nordo's kernels in one pinned forward pass | one training step (the rest ran eager's ATen kernels)")
    for r in rows:
        def ops(counts):
            return ", ".join(f"{name} x{n}" for name, n in sorted(counts.items())) or "none"
        print(f"  {r['family']} {r['dtype']}: {ops(r['ordo_forward'])} | {ops(r['ordo_step'])}")
    for r in rows:
        for message in r["fallbacks"]:
            print(f"  {r['family']} {r['dtype']}: {message}")
    failed = [f"{r['family']} {r['dtype']}" for r in rows if r["pinned_logits"] or r["pinned_grads"]]
    if exact and failed:
        print(f"\nFAIL: with order {args.order}, pinned differs from eager in {', '.join(failed)}")
        return 1
    if exact:
        print(f"\npinned with {args.order}: logits and gradients equal eager bit for bit in all {len(rows)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
