"""``repr(tensor)`` matches PyTorch's character for character (with ``torch.`` spelled
``tensorplay.``). torch is the oracle where installed; literal strings (taken from
torch 2.13) keep the format pinned without it."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tensorplay as tp

NAN, INF = float("nan"), float("inf")

# name -> (data, dtypes to print it in)
FLOATS = ("float32", "float64", "float16", "bfloat16", "complex64")
CASES = {
    "ints": ([1, 2, 3], ("int64", "int32", "int8", "uint8", "float32")),
    "wide_ints": ([-100, 5, 20000], ("int64", "int16") + FLOATS),
    "four_decimals": ([1.5, 2.25, 3.125678], FLOATS),
    "integer_valued_floats": ([1.0, 2.0, -3.0], FLOATS),
    "sci_large": ([1e10, 2.0, 3.0], ("float32", "float64", "complex64")),
    "sci_small": ([1e-5, 1.0, 2.0], FLOATS),
    "sci_ratio": ([0.001, 10.5, 200.25], FLOATS),
    "sci_integer_valued": ([1e7, 1.0], ("float32", "float64", "bfloat16")),
    "tiny_and_zero": ([1e-10, 0.0], ("float32", "float64")),
    "nan_inf": ([NAN, INF, -INF, 1.5], FLOATS),
    "nan_with_ints": ([NAN, 1.0, 2.0], FLOATS),
    "only_nan": ([NAN], ("float32",)),
    "negative_zero": ([-0.0, 1.0], ("float32", "float64")),
    "zeros": ([0.0] * 30, ("float32", "float64")),
    "bool": ([True, False, True], ("bool",)),
    "bool_as_numbers": ([i % 3 == 0 for i in range(30)], ("bool", "int32", "float32")),
    "zero_dim": (3.5, ("float32", "float64", "bfloat16", "int32", "complex64")),
    "zero_dim_sci": (1e20, ("float32", "float64")),
    "zero_dim_int": (7, ("int64", "int32", "bool")),
    "two_d": ([[1.5, 2.0], [3.25, -4.0]], FLOATS + ("int64",)),
    "three_d": (np.arange(24.0).reshape(2, 3, 4).tolist(), ("float32", "float64", "int32")),
    "four_d": (np.arange(16.0).reshape(2, 2, 2, 2).tolist(), ("float32",)),
    "randn_3d": (np.random.RandomState(0).randn(2, 3, 4).tolist(), ("float32", "float64")),
    "wraps_at_80_columns": ((np.arange(40) / 3.0).tolist(), ("float32", "float64", "complex64")),
    "wraps_ints": (list(range(100)), ("int64", "int32")),
    "wraps_2d": ((np.arange(60) * 1.5).reshape(3, 20).tolist(), ("float32",)),
    "complex": ([1 + 2j, -3.5 - 1j, 0j], ("complex64", "complex128")),
    "complex_sci": ([1e-6 + 1j, 5 + 1e5j], ("complex64", "complex128")),
}
BIG = {  # more than 1000 elements: summarized with "..."
    "summarized_1d": np.arange(2000.0),
    "summarized_2d": np.arange(3000).reshape(60, 50),
    "summarized_fractions": np.arange(1500) / 7.0,
    "summarized_3d": np.random.RandomState(1).randn(12, 10, 10),
    "summarized_complex": np.arange(1200) + 1j * np.arange(1200),
}


def _normalize(s: str) -> str:
    # "tensorplay.float64" is five characters longer than "torch.float64", which can move
    # a suffix onto its own line in one repr and not the other; compare suffixes inline.
    return re.sub(r",\n +(dtype|device|size|requires_grad|grad_fn)=", r", \1=", s)


def assert_same_repr(t, x):
    expected = repr(x).replace("torch.", "tensorplay.")
    assert _normalize(repr(t)) == _normalize(expected)


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="torch not installed (it is the repr oracle)")


@pytest.mark.parametrize("name,dtype", [(n, d) for n, (_, dts) in CASES.items() for d in dts])
def test_repr_matches_torch(torch, name, dtype):
    data = CASES[name][0]
    assert_same_repr(
        tp.tensor(data, dtype=getattr(tp, dtype)), torch.tensor(data, dtype=getattr(torch, dtype))
    )


@pytest.mark.parametrize(
    "name,dtype",
    [
        (n, d)
        for n in BIG
        for d in (
            ("complex64", "complex128")
            if np.iscomplexobj(BIG[n])
            else ("float32", "float64", "int64", "int32", "bfloat16", "complex64")
        )
    ],
)
def test_summarized_repr_matches_torch(torch, name, dtype):
    arr = BIG[name]
    x = torch.from_numpy(arr).to(getattr(torch, dtype))
    t = tp.from_numpy(arr).to(getattr(tp, dtype))
    assert_same_repr(t, x)


def test_special_reprs_match_torch(torch):
    pairs = [
        (tp.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)),
        (
            tp.tensor(1.5, dtype=tp.float64, requires_grad=True),
            torch.tensor(1.5, dtype=torch.float64, requires_grad=True),
        ),
        (
            tp.arange(30.0).reshape(1, 30).to(tp.float64).requires_grad_(),
            torch.arange(30.0).reshape(1, 30).to(torch.float64).requires_grad_(),
        ),
        (tp.empty(0), torch.empty(0)),
        (tp.empty(2, 0), torch.empty(2, 0)),
        (tp.empty(0, dtype=tp.int32), torch.empty(0, dtype=torch.int32)),
        (tp.empty(0, 3, dtype=tp.int64), torch.empty(0, 3, dtype=torch.int64)),
        (tp.empty(0, dtype=tp.bool), torch.empty(0, dtype=torch.bool)),
        (tp.empty(2, 3, device="meta"), torch.empty(2, 3, device="meta")),
        (
            tp.empty(2, 3, device="meta", dtype=tp.int64),
            torch.empty(2, 3, device="meta", dtype=torch.int64),
        ),
        (tp.arange(6).reshape(2, 3).t(), torch.arange(6).reshape(2, 3).t()),  # non-contiguous
    ]
    for t, x in pairs:
        assert_same_repr(t, x)


def test_default_dtype_changes_which_suffix_is_hidden(torch):
    old_tp, old_torch = tp.get_default_dtype(), torch.get_default_dtype()
    tp.set_default_dtype(tp.float64)
    torch.set_default_dtype(torch.float64)
    try:
        for data in ([1.5, 2.0], [1 + 1j]):
            for dt in ("float32", "float64", "complex64", "complex128"):
                if isinstance(data[0], complex) and not dt.startswith("complex"):
                    continue
                assert_same_repr(
                    tp.tensor(data, dtype=getattr(tp, dt)),
                    torch.tensor(data, dtype=getattr(torch, dt)),
                )
    finally:
        tp.set_default_dtype(old_tp)
        torch.set_default_dtype(old_torch)


def test_cuda_repr_matches_torch(torch):
    if not tp.cuda.is_available() or not torch.cuda.is_available():
        pytest.skip("CUDA not available")
    assert_same_repr(tp.tensor([1.5, 2.0], device="cuda"), torch.tensor([1.5, 2.0], device="cuda"))
    assert_same_repr(
        tp.tensor([1, 2], dtype=tp.int32, device="cuda"),
        torch.tensor([1, 2], dtype=torch.int32, device="cuda"),
    )


# ---- torch-free: literal strings -----------------------------------------------------------------


@pytest.mark.parametrize(
    "make,expected",
    [
        (lambda: tp.tensor([1.5, 2.25, 3.125678]), "tensor([1.5000, 2.2500, 3.1257])"),
        (lambda: tp.tensor([1e10, 2.0, 3.0]), "tensor([1.0000e+10, 2.0000e+00, 3.0000e+00])"),
        (lambda: tp.tensor([NAN, INF, 1.0]), "tensor([nan, inf, 1.])"),
        (lambda: tp.arange(2000), "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])"),
        (
            lambda: tp.tensor([[1, 2], [3, 4]], dtype=tp.int32),
            "tensor([[1, 2],\n        [3, 4]], dtype=tensorplay.int32)",
        ),
        (lambda: tp.tensor([1 + 2j, -3.5 - 1j]), "tensor([ 1.0000+2.j, -3.5000-1.j])"),
        (lambda: tp.tensor(2.5, dtype=tp.float64), "tensor(2.5000, dtype=tensorplay.float64)"),
        (lambda: tp.zeros(2, 0, dtype=tp.int64), "tensor([], size=(2, 0), dtype=tensorplay.int64)"),
        (lambda: tp.ones(2, requires_grad=True), "tensor([1., 1.], requires_grad=True)"),
        (
            lambda: tp.tensor([0.1, 0.25], dtype=tp.bfloat16),
            "tensor([0.1001, 0.2500], dtype=tensorplay.bfloat16)",
        ),
        (lambda: tp.tensor([True, False]), "tensor([ True, False])"),
        (
            lambda: tp.arange(8.0).reshape(2, 2, 2),
            "tensor([[[0., 1.],\n         [2., 3.]],\n\n        [[4., 5.],\n         [6., 7.]]])",
        ),
        (lambda: tp.empty(2, 3, device="meta"), "tensor(..., device='meta', size=(2, 3))"),
    ],
)
def test_literal_reprs(make, expected):
    assert repr(make()) == expected


def test_long_suffix_moves_to_its_own_line():
    # torch's rule: a suffix that would pass column 80 starts a new line
    assert repr(tp.zeros(30, dtype=tp.float64)) == (
        "tensor([0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., "
        "0., 0., 0., 0., 0., 0.,\n        0., 0., 0., 0., 0., 0.], dtype=tensorplay.float64)"
    )
    r = repr(tp.tensor([i % 3 == 0 for i in range(30)], dtype=tp.float64))
    assert r.endswith("1., 0., 0.],\n       dtype=tensorplay.float64)")
