"""``import tensorplay`` stays cheap: ml_dtypes (about half a second to import) loads only
when a bfloat16 numpy type is first needed. Each check runs in a fresh interpreter, since
this test process may have imported ml_dtypes already."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import ml_dtypes

import tensorplay as tp
from tensorplay import _dtype as D


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_import_does_not_load_ml_dtypes():
    _run("import sys, tensorplay; assert 'ml_dtypes' not in sys.modules")


def test_bfloat16_dtype_needs_no_ml_dtypes():
    _run("""
        import sys, tensorplay as tp
        d = tp.bfloat16
        assert (d.name, d.itemsize, d.is_floating_point, str(d)) == (
            "bfloat16", 2, True, "tensorplay.bfloat16")
        assert tp.promote_types(d, tp.float16) is tp.float32
        assert tp.promote_types(d, tp.int64) is d
        assert tp.tensor([1.0]).to(tp.float16).tolist() == [1.0]
        assert 'ml_dtypes' not in sys.modules
    """)


def test_bfloat16_tensor_values_after_lazy_load():
    out = _run("""
        import sys, tensorplay as tp
        x = tp.tensor([1.0, 1.00390625, 3.0, -2.5], dtype=tp.bfloat16)
        assert 'ml_dtypes' in sys.modules
        assert x.dtype is tp.bfloat16 and tp.bfloat16.np.name == "bfloat16"
        assert x.tolist() == [1.0, 1.0, 3.0, -2.5]  # 1 + 2**-8 rounds to even: 1
        assert (x * 2).float().tolist() == [2.0, 2.0, 6.0, -5.0]
        assert tp.from_numpy(x.numpy()).dtype is tp.bfloat16
        print(x)
    """)
    assert out.strip() == "tensor([ 1.0000,  1.0000,  3.0000, -2.5000], dtype=tensorplay.bfloat16)"


def test_from_numpy_takes_ml_dtypes_array_before_bfloat16_is_used():
    _run("""
        import ml_dtypes, numpy as np, tensorplay as tp
        t = tp.from_numpy(np.array([1.5, 2.0], ml_dtypes.bfloat16))
        assert t.dtype is tp.bfloat16 and t.tolist() == [1.5, 2.0]
    """)


def test_bfloat16_largest_finite_value_matches_ml_dtypes():
    assert D._FLOAT_MAX[tp.bfloat16] == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
