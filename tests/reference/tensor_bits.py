"""Bit-pattern comparison of torch tensors, for the worker processes of the torch 2.15 reference
tests (they put this directory on PYTHONPATH). bits.py is the numpy counterpart."""
import numpy as np
import torch


def bits(t):
    t = t.contiguous()
    return t.view(torch.int16).numpy() if t.element_size() == 2 else t.view(torch.int32).numpy()


def same(a, b):
    """(ok, why) for torch's `a` and ordo's `b`: same dtype, shape and bit patterns; every NaN
    equals every NaN."""
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False, f"dtype/shape {b.dtype}{tuple(b.shape)} vs torch {a.dtype}{tuple(a.shape)}"
    differ = (bits(a) != bits(b)) & ~(torch.isnan(a.float()) & torch.isnan(b.float())).numpy()
    if differ.any():
        i = int(np.flatnonzero(differ.ravel())[0])
        return False, f"{int(differ.sum())} of {a.numel()} differ; first at {i}: ordo {b.reshape(-1)[i].item()!r} torch {a.reshape(-1)[i].item()!r}"
    return True, ""


# The attention tests run torch on 1, 2 and (a third of the cases) 3 threads.
THREAD_COUNTS = (1, 2, 3)


def runs_on(threads, case_index):
    return threads < 3 or case_index % 3 == 0


def refusal_why(error, case, threads):
    """"" when ordo's error is the refusal it owes this launch, else why the case fails. With torch on
    more than 2 threads, PyTorch runs MKL on all of them for a launch of one (batch, head), whose
    splits are measured on 2 only, so ordo refuses the launch; any other error, or that refusal of
    any other launch, fails."""
    if threads > 2 and case["batch"] * case["heads"] == 1 and "MKL's splits of a call are measured on 2 threads only" in str(error):
        return ""
    return f"ordo: {error}"
