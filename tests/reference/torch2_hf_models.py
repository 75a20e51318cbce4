#!/usr/bin/env python3
"""Hugging Face causal LMs compiled inside ordo.torch.pinned("torch2.15-cpu") against the same
models run eager, with torch 2.15 and transformers 5.23 as installed: the logits of a forward pass
and every parameter's gradient of a training step must be eager's bits.

    PYTHONPATH=build/python "$(scripts/torch2-venv --python)" tests/reference/torch2_hf_models.py [--quick|--full]

Each case is one run of examples/hf_parity.py's comparison (random weights from a small config):
a family, a dtype, torch's thread count, the sizes (hidden sizes and head dims that are not
multiples of the vector width, sequence lengths that are not either), the grouped-query ratio
(query heads per key/value head: 1, 2, 4), left padding with an attention mask, and (two CI
cases) torch.compile(dynamic=True), whose symbolic sizes pinned specializes where ordo compiles a
kernel for them. The negative
controls run plain torch.compile too and fail unless it differs from eager: a case that cannot
tell a reordering apart proves nothing. The cases that run ordo's kernels (kernels="ordo") must
run the training step's loss in ordo (cross_entropy and its backward), and the MLP's activation
where transformers calls F.silu or F.gelu for it (silu, gelu, gelu_tanh and their backward ops)
unless pinned warned that it ran torch's kernel for it, naming why (Phi-3's gate, a chunk of
one projection, runs with the order's inner_loop=row). Missing torch 2.15 or
transformers 5.23 fails the test.
"""
import argparse
import os
import sys
import tempfile
import warnings

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="ordo_hf_models_"))
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))

import torch  # noqa: E402
import transformers  # noqa: E402

import tiers  # noqa: E402
from summary import print_summary  # noqa: E402

WANT = {"torch": "2.15.0", "transformers": "5.23.0"}

# family, dtype, threads, heads, kv heads, hidden, head_dim (0: hidden/heads), seq, left pad, control
# [, dynamic: torch.compile(dynamic=True)]
BASE = dict(vocab=512, intermediate=256, layers=2, batch=2, seed=0, repeats=0, order="torch2.15-cpu", strict=False)
# pinned's kernels: "ordo" (ordo's kernel for every call it can run, so these cases test ordo's
# kernels inside compiled models) but for the cases listed here, which run pinned's default
# ("fastest": torch's own kernel where it gives the order's bits and times faster).
FASTEST = {1, 9}  # positions in the tier's list of cases
CASES_CI = [
    ("llama", "f32", 2, 4, 2, 128, 0, 48, 0, True),
    ("llama", "bf16", 1, 4, 1, 128, 0, 37, 4, False),
    ("qwen2", "f32", 1, 5, 5, 200, 0, 29, 3, False),
    ("qwen2", "bf16", 2, 4, 2, 128, 0, 48, 0, False),
    ("gemma", "f32", 2, 4, 1, 128, 32, 33, 5, False),
    ("gemma", "bf16", 1, 4, 2, 128, 32, 48, 0, False),
    ("phi3", "f32", 1, 4, 4, 128, 0, 48, 2, False),
    ("phi3", "bf16", 2, 4, 2, 136, 0, 40, 0, False),
    ("gpt2", "f32", 1, 4, 4, 128, 0, 48, 3, False),
    ("gpt2", "bf16", 2, 4, 4, 128, 0, 48, 0, True),
    ("mistral", "f32", 2, 4, 2, 120, 0, 31, 0, False),
    ("qwen3", "bf16", 1, 4, 2, 128, 0, 48, 6, False),
    ("gpt_neox", "bf16", 2, 4, 2, 128, 0, 40, 3, False),  # GELU's erf form (oneDNN's), with a layer_norm in ordo
    ("falcon", "f32", 1, 4, 1, 128, 0, 44, 3, False),  # multi-query attention: one K/V head, broadcast; GELU's erf form
    # torch.compile(dynamic=True): the sizes ordo compiles for specialized, the rest symbolic
    ("llama", "f32", 2, 4, 2, 128, 0, 41, 3, False, True),
    ("gpt2", "bf16", 1, 4, 4, 128, 0, 29, 0, False, True),
]
CASES_QUICK = [CASES_CI[0], CASES_CI[9][:-1] + (False,)]  # one negative control
# transformers' activation names -> the ordo op pinned routes them to.
ACTIVATION_OPS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh"}
FAMILIES_FULL = ["llama", "qwen2", "gemma", "phi3", "gpt2", "mistral", "qwen3", "olmo2", "granite", "stablelm",
                 "starcoder2", "gpt_neox", "cohere", "gemma3_text", "smollm3", "glm", "opt", "falcon"]


def cases_full():
    """Every family in both dtypes on 1 and 2 threads, with and without GQA and padding."""
    out = []
    for i, family in enumerate(FAMILIES_FULL):
        for dtype in ("f32", "bf16"):
            for threads in (1, 2):
                kv = (4, 2, 1)[(i + threads) % 3]
                out.append((family, dtype, threads, 4, kv, 128, 0, 48 - 5 * (threads - 1), 3 * (threads - 1),
                            i == 0 and threads == 2))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    tiers.add_arguments(ap)
    args = ap.parse_args()
    got = {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__}
    if got != WANT:
        print(f"FAIL: this test compares against {WANT}, and found {got}")
        return 1
    import hf_parity  # the comparison users run, as the example prints it
    warnings.filterwarnings("ignore", message=".*token_id.*")
    tier = tiers.chosen(args)
    cases = CASES_QUICK if tier == tiers.QUICK else (cases_full() if tier == tiers.FULL else CASES_CI)
    table, passed, failed = {}, 0, 0
    for i, case in enumerate(cases):
        family, dtype, threads, heads, kv, hidden, head_dim, seq, pad, control = case[:10]
        dynamic = len(case) > 10 and case[10]
        kernels = "fastest" if i in FASTEST else "ordo"
        torch.set_num_threads(threads)
        run = argparse.Namespace(**BASE, heads=heads, kv_heads=kv, hidden=hidden, head_dim=head_dim, seq=seq, pad=pad,
                                 compiled=control, dynamic=dynamic, kernels=kernels)
        name = (f"{family} {dtype} threads={threads} heads={heads}/{kv} hidden={hidden} seq={seq} pad={pad}"
                f"{' dynamic=True' if dynamic else ''} kernels={kernels}")
        try:
            r = hf_parity.compare(family, dtype, run)
        except Exception as e:  # noqa: BLE001 - a case that cannot run is a failure, with its reason
            print(f"FAIL {name}: {type(e).__name__}: {str(e)[:300]}")
            failed += 1
            continue
        problems = []
        if r["pinned_logits"]:
            problems.append(f"{r['pinned_logits']} of {r['logits']} logits differ from eager")
        if r["pinned_grads"]:
            problems.append(f"{r['pinned_grads']} of {r['grads']} gradient elements differ from eager")
        # With ordo's kernels the training step's loss is ordo's cross_entropy, forward and backward.
        missing = [op for op in ("cross_entropy", "cross_entropy_backward") if kernels == "ordo" and not r["ordo_step"].get(op)]
        # And the MLP's activation, where transformers calls F.silu or F.gelu for it ("gelu_new" is a
        # composite of torch.tanh, which pinned does not see).
        act = ACTIVATION_OPS.get(r["activation"])
        act_warned = act and any(f": {act} runs torch's own kernel" in w for w in r["fallbacks"])
        if kernels == "ordo" and act and not act_warned:
            missing += [f"{op} (the MLP's {r['activation']})" for op in (act, act + "_backward") if not r["ordo_step"].get(op)]
            if not r["ordo_forward"].get(act):
                problems.append(f"the forward pass ran no ordo {act} for the MLP's {r['activation']} (ordo ops: {dict(r['ordo_forward'])})")
        if missing:
            problems.append(f"the training step ran no ordo {', '.join(missing)} (ordo ops: {dict(r['ordo_step'])})")
        if control and not (r["plain_logits"] and r["plain_grads"]):
            problems.append(f"negative control: plain torch.compile should differ from eager, and differs in "
                            f"{r['plain_logits']} logits and {r['plain_grads']} gradient elements")
        key = ("hf_model", family, dtype)
        good, total = table.get(key, [0, 0])
        table[key] = [good + (not problems), total + 1]
        if problems:
            print(f"FAIL {name}: {'; '.join(problems)}")
            failed += 1
        else:
            control_text = (f"; plain compile differs in {r['plain_logits']} logits, {r['plain_grads']} gradient "
                            f"elements") if control else ""
            print(f"ok   {name}: {r['logits']} logits and {r['grads']} gradient elements equal eager{control_text}")
            passed += 1
    return print_summary(table, passed, failed)


if __name__ == "__main__":
    sys.exit(main())
