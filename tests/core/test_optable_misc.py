"""Views share storage, indexing against numpy, and bad input (generated from the op table
where the property holds for a whole family of rows)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra.numpy import array_shapes, arrays, basic_indices
from optable_samples import VIEW_REF, samples, to_ref

import tensorplay as tp
from tensorplay._optable import ROWS

VIEW_ROWS = [r for r in ROWS if r.kind == "view"]
# reshape-like rows copy when the strides forbid a view (tested separately)
_MAY_COPY = {"reshape", "flatten", "unflatten"}


def _storage(t):
    return t.untyped_storage().data_ptr()


# ---- views ------------------------------------------------------------------------------


@pytest.mark.parametrize("row", VIEW_ROWS, ids=[r.name for r in VIEW_ROWS])
def test_views_share_storage_and_match_numpy(row):
    ran = 0
    for s in samples(row, tp.float32):
        base = s.args[0]
        outs = row.fn(*s.args, **s.kwargs)
        want = VIEW_REF[row.name](*to_ref(s.args), **s.kwargs)
        outs_t = outs if row.multi else (outs,)
        wants = want if row.multi else (want,)
        assert len(outs_t) == len(wants)
        copied = s.name == "copying" or s.name.startswith("copying")
        for v, w in zip(outs_t, wants):
            np.testing.assert_array_equal(np.asarray(v), np.asarray(w), err_msg=f"{row.name} {s}")
            if copied:
                assert _storage(v) != _storage(base), f"{row.name} {s}: expected a copy"
                continue
            assert _storage(v) == _storage(base), f"{row.name} {s}: not a view"
            assert v._version == base._version
            if v.numel() and all(st_ != 0 for st_, n in zip(v.stride(), v.shape) if n > 1):
                before = base._version
                v.fill_(42.0)  # a write through the view shows in the base
                assert base._version == before + 1
                assert (np.asarray(base) == 42.0).sum() >= v.numel() or row.name == "as_strided"
                assert np.all(np.asarray(v) == 42.0)
        ran += 1
    assert ran


def test_expand_is_stride_zero_view():
    x = tp.tensor([[1.0], [2.0]])
    e = x.expand(2, 3)
    assert e.stride() == (1, 0) and _storage(e) == _storage(x)
    x[0, 0] = 5.0
    assert e.tolist() == [[5.0] * 3, [2.0] * 3]


def test_view_on_non_viewable_layout_raises_and_reshape_copies():
    x = tp.arange(12.0).view(3, 4).t()
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        x.view(12)
    r = x.reshape(12)
    assert _storage(r) != _storage(x)
    np.testing.assert_array_equal(r.numpy(), np.arange(12.0).reshape(3, 4).T.reshape(12))
    c = tp.arange(12.0).view(3, 4)
    assert _storage(c.reshape(4, 3)) == _storage(c)  # viewable: no copy


def test_view_shares_version_counter():
    x = tp.zeros(2, 3)
    v = x.view(6)
    t = x.t()
    v.add_(1)
    assert x._version == v._version == t._version == 1
    assert x.tolist() == [[1.0] * 3] * 2


def test_unbind_split_chunk_are_views():
    x = tp.arange(6.0).view(2, 3)
    for parts in (x.unbind(0), x.split(1, 1), x.chunk(2, 0)):
        for p in parts:
            assert _storage(p) == _storage(x)
    x.unbind(1)[2].fill_(-1.0)
    assert x.tolist() == [[0.0, 1.0, -1.0], [3.0, 4.0, -1.0]]


def test_view_errors():
    x = tp.zeros(2, 3)
    with pytest.raises(RuntimeError, match="invalid for input of size"):
        x.view(4)
    with pytest.raises(RuntimeError, match="only one dimension"):
        x.view(-1, -1)
    with pytest.raises(RuntimeError, match="expanded size"):
        x.expand(4, 3)
    with pytest.raises(RuntimeError, match="number of dims"):
        x.permute(0)
    with pytest.raises(IndexError):
        x.narrow(1, 2, 2)
    with pytest.raises(IndexError):
        x.select(0, 2)
    with pytest.raises(RuntimeError, match="storage of at least"):
        x.as_strided((3, 3), (3, 1))


# ---- indexing ---------------------------------------------------------------------------


@given(data=st.data())
def test_basic_indexing_is_a_view_matching_numpy(data):
    shape = data.draw(array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5))
    arr = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    idx = data.draw(
        basic_indices(shape, allow_newaxis=True, allow_ellipsis=True).filter(
            lambda i: not _has_negative_step(i)
        )
    )
    x = tp.tensor(arr)
    v = x[idx]
    np.testing.assert_array_equal(np.asarray(v), arr[idx])
    assert _storage(v) == _storage(x)
    if v.numel():
        v.fill_(-1.0)
        arr[idx] = -1.0
        np.testing.assert_array_equal(x.numpy(), arr)


def _has_negative_step(index):
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, slice) and i.step is not None and i.step < 0 for i in items)


@given(data=st.data())
def test_advanced_indexing_copies_matching_numpy(data):
    shape = data.draw(array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    arr = data.draw(arrays(np.int64, shape, elements=st.integers(-50, 50)))
    kind = data.draw(st.sampled_from(["tensor", "list", "mask", "mixed"]))
    n = shape[0]
    if kind == "mask":
        mask = data.draw(arrays(np.bool_, shape[:1]))
        np_idx, tp_idx = mask, tp.tensor(mask)
    else:
        ints = data.draw(st.lists(st.integers(-n, n - 1), min_size=0, max_size=5))
        ints_arr = np.array(ints, dtype=np.int64)
        np_idx = ints_arr
        tp_idx = tp.tensor(ints_arr) if kind in ("tensor", "mixed") else ints
        if kind == "mixed" and len(shape) > 1:
            np_idx, tp_idx = (
                (slice(None), ints_arr % shape[1]),
                (slice(None), tp.tensor(ints_arr % shape[1])),
            )
    x = tp.tensor(arr)
    got = x[tp_idx]
    want = arr[np_idx]
    np.testing.assert_array_equal(np.asarray(got), want)
    if got.numel():
        assert _storage(got) != _storage(x)
    # setitem with the same index writes into x
    v = x._version
    x[tp_idx] = 7
    arr[np_idx] = 7
    np.testing.assert_array_equal(x.numpy(), arr)
    assert x._version == v + 1


def test_setitem_basic_and_tensor_values():
    x = tp.zeros(3, 4)
    x[1] = 1.0
    x[:, 0] = tp.tensor([5.0, 6.0, 7.0])
    x[2, 1:3] = tp.tensor(9.0)
    x[tp.tensor([True, False, False])] = 2.0
    want = np.zeros((3, 4))
    want[1] = 1
    want[:, 0] = [5, 6, 7]
    want[2, 1:3] = 9
    want[0] = 2
    np.testing.assert_array_equal(x.numpy(), want)


def test_out_of_range_indices_raise_index_error():
    x = tp.zeros(3, 4)
    for idx in (3, -4, (0, 4), (slice(None), 7), [0, 3], tp.tensor([5])):
        with pytest.raises(IndexError):
            x[idx]
        with pytest.raises(IndexError):
            x[idx] = 1.0
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0, 0]
    with pytest.raises(IndexError, match="mask"):
        x[tp.tensor([True, False])]
    with pytest.raises(IndexError):
        x[tp.tensor([0.5])]


# ---- bad input, generated from the table -------------------------------------------------

BROADCAST_ROWS = [r for r in ROWS if r.kind == "pointwise" and r.n_inputs == 2 and r.ufunc]
BROADCAST_ROWS += [r for r in ROWS if r.name in ("isclose",)]


@pytest.mark.parametrize("row", BROADCAST_ROWS, ids=[r.name for r in BROADCAST_ROWS])
def test_bad_broadcast_names_op_and_shapes(row):
    a, b = tp.ones(2, 3, dtype=tp.int64), tp.ones(4, dtype=tp.int64)
    if "i" not in row.allow:
        a, b = a.float(), b.float()
    with pytest.raises(
        RuntimeError,
        match=rf"{row.name}\(\): shapes \(2, 3\) and \(4,\) cannot "
        "broadcast",
    ):
        row.fn(a, b)


def test_bad_broadcast_three_inputs():
    with pytest.raises(RuntimeError, match=r"where\(\): shapes .*cannot broadcast"):
        tp.where(tp.ones(2, 3, dtype=tp.bool), tp.ones(4), tp.ones(1))
    with pytest.raises(RuntimeError, match=r"clamp\(\): shapes .*cannot broadcast"):
        tp.clamp(tp.ones(2, 3), tp.ones(4), None)


MULTI_INPUT = [
    r
    for r in ROWS
    if r.kind != "view"
    and (r.n_inputs in ("seq", "star") or (isinstance(r.n_inputs, int) and r.n_inputs >= 2))
]


@pytest.mark.parametrize("row", MULTI_INPUT, ids=[r.name for r in MULTI_INPUT])
def test_mixing_devices_raises(row):
    """Every multi-input row refuses a meta tensor next to a (non-0-d) cpu tensor."""
    for s in samples(row, tp.float32):
        args = list(s.args)
        if row.n_inputs == "seq":
            if len(args[0]) < 2:
                continue
            args[0] = [args[0][0].to("meta")] + list(args[0][1:])
        else:
            pos = [i for i, a in enumerate(args) if isinstance(a, tp.Tensor) and a.dim()]
            if len(pos) < 2:
                continue
            args[pos[0]] = args[pos[0]].to("meta")
        with pytest.raises(RuntimeError, match="device"):
            row.fn(*args, **s.kwargs)
        return
    pytest.fail(f"{row.name}: no sample with two non-0-d tensors")


INPLACE_ROWS = [r for r in ROWS if r.inplace_fn is not None]


def _readonly(shape=(2, 3)):
    arr = np.ones(shape, np.float32)  # a read-only numpy array seen through from_numpy
    arr.flags.writeable = False
    return tp.from_numpy(arr)


@pytest.mark.parametrize("row", INPLACE_ROWS, ids=[r.name for r in INPLACE_ROWS])
def test_inplace_on_readonly_numpy_raises(row):
    for s in samples(row, tp.float32) + samples(row, tp.int64):
        x = s.args[0]
        if (
            not isinstance(x, tp.Tensor)
            or x.dim() == 0
            or 0 in x.shape
            or any(st_ == 0 for st_ in x.stride())
        ):
            continue
        try:
            want = row.fn(*s.args, **s.kwargs)
        except (TypeError, RuntimeError):
            continue
        if tuple(want.shape) != tuple(x.shape):
            continue
        arr = np.asarray(x).copy()
        arr.flags.writeable = False
        ro = tp.from_numpy(arr)
        with pytest.raises(RuntimeError, match="read-only"):
            row.inplace_fn(ro, *s.args[1:], **s.kwargs)
        assert ro._version == 0
        return
    pytest.fail(f"{row.name}_: no sample to write into")


def test_composite_writes_on_readonly_raise():
    for write in (
        lambda t: t.fill_(1.0),
        lambda t: t.zero_(),
        lambda t: t.copy_(tp.zeros(2, 3)),
        lambda t: t.__setitem__(0, 2.0),
        lambda t: t.__setitem__([0], 2.0),
        lambda t: t.__iadd__(1),
    ):
        with pytest.raises(RuntimeError, match="read-only"):
            write(_readonly())


DIM_ROWS = [
    r
    for r in ROWS
    if any(p.strip().split("=")[0] in ("dim", "dim0", "start_dim") for p in r.params.split(","))
]


@pytest.mark.parametrize("row", DIM_ROWS, ids=[r.name for r in DIM_ROWS])
def test_out_of_range_dim_raises_index_error(row):
    for s in samples(row, tp.float32):
        names = [p.strip().split("=")[0] for p in row.params.split(",")]
        kw = dict(s.kwargs)
        args = list(s.args)
        for key in ("dim", "dim0", "start_dim"):
            if key in names:
                i = names.index(key)
                if key in kw or i >= len(args):
                    kw[key] = 7
                else:
                    args[i] = 7
                break
        if row.name in ("cat", "stack") and len(args) < 2:
            kw["dim"] = 7
        with pytest.raises(IndexError, match="out of range"):
            row.fn(*args, **kw)
        return
    pytest.fail(f"{row.name}: no samples")


def test_factory_integer_overflow_raises():
    with pytest.raises(RuntimeError, match="overflow|Overflow"):
        tp.tensor([300], dtype=tp.uint8)
    with pytest.raises(RuntimeError, match="overflow|Overflow"):
        tp.full((2,), 2**40, dtype=tp.int32)
    with pytest.raises(RuntimeError, match="overflow|Overflow"):
        tp.tensor([2**70])
    with pytest.raises(RuntimeError, match="overflow|Overflow"):
        tp.tensor(2**64)
    with pytest.raises(RuntimeError, match="overflow|Overflow"):
        tp.tensor([-256], dtype=tp.uint8)
    # torch wraps negative integers into uint8 (down to -255) and arange into narrow dtypes
    assert tp.tensor([-1], dtype=tp.uint8).tolist() == [255]
    assert tp.arange(0, 300, 100, dtype=tp.int8).tolist() == [0, 100, -56]
    assert tp.tensor([255], dtype=tp.uint8).tolist() == [255]
    assert tp.full((1,), 2**31 - 1, dtype=tp.int32).tolist() == [2**31 - 1]


def test_wrong_types_raise_type_error():
    with pytest.raises(TypeError):
        tp.add(tp.ones(2), "a")
    with pytest.raises(TypeError):
        tp.cat(tp.ones(2))
    with pytest.raises(TypeError):
        tp.add(1, 2)
