"""``tp.save`` / ``tp.load``: safetensors checkpoints, round trips on values, torch interop and
the errors for files that are not checkpoints."""

from __future__ import annotations

import io
import json
import math
import sys
from collections import OrderedDict

import numpy as np
import pytest
import safetensors
import safetensors.numpy

import tensorplay as tp
from tensorplay import nn
from tensorplay.optim.adamw import AdamW
from tensorplay.optim.sgd import SGD

try:  # the oracle: tests that compare with torch skip without it
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(
    torch is None,
    reason="torch (the test oracle) is not installed: pip install /opt/wheels/torch-2.13.0*.whl",
)


def _np(t):
    return np.asarray(t.detach().cpu().numpy())


def _same_tensor(a, b):
    assert isinstance(b, tp.Tensor)
    assert a.dtype is b.dtype and tuple(a.shape) == tuple(b.shape)
    assert str(a.device) == str(b.device)
    np.testing.assert_array_equal(_np(a), _np(b))


def _roundtrip(obj, tmp_path, name="ckpt.safetensors"):
    path = tmp_path / name
    tp.save(obj, path)
    return tp.load(path)


def _mlp(seed=0):
    tp.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))


# ---- round trips ------------------------------------------------------------------------------


ALL_DTYPES = [
    tp.bool,
    tp.uint8,
    tp.int8,
    tp.int16,
    tp.int32,
    tp.int64,
    tp.float16,
    tp.bfloat16,
    tp.float32,
    tp.float64,
    tp.complex64,
    tp.complex128,
]


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_tensor_roundtrip_every_dtype(dtype, tmp_path):
    rng = np.random.default_rng(0)
    values = rng.standard_normal((3, 4)) * 5
    if dtype.is_complex:
        values = values + 1j * rng.standard_normal((3, 4))
    t = tp.tensor(values).to(dtype)
    back = _roundtrip(t, tmp_path)
    _same_tensor(t, back)
    assert not back.requires_grad


@pytest.mark.parametrize("shape", [(), (0,), (2, 0, 3), (1,), (2, 3, 4)])
def test_shapes_including_0d_and_empty(shape, tmp_path):
    t = tp.arange(math.prod(shape), dtype=tp.float32).reshape(shape) * 1.5
    back = _roundtrip({"t": t, "i": t.to(tp.int64)}, tmp_path)
    _same_tensor(t, back["t"])
    _same_tensor(t.to(tp.int64), back["i"])


def test_non_contiguous_tensors_save_their_values(tmp_path):
    base = tp.arange(24.0).reshape(4, 6)
    views = {"t": base.t(), "step": base[::2, 1::3], "expanded": tp.ones(3).expand(4, 3)}
    assert not views["t"].is_contiguous()
    back = _roundtrip(views, tmp_path)
    for k, v in views.items():
        _same_tensor(v, back[k])
        assert back[k].is_contiguous()
    # saved as independent values: a write to one loaded tensor does not reach another
    shared = _roundtrip({"a": base, "b": base[0]}, tmp_path, "shared.safetensors")
    shared["a"][0, 0] = 100.0
    assert shared["b"][0].item() == 0.0


def test_structure_and_python_values_roundtrip_exactly(tmp_path):
    obj = {
        "none": None,
        "flags": [True, False],
        "ints": (0, -3, 2**70),
        "floats": [1.5, -0.0, float("inf"), float("-inf")],
        "complex": 2 - 3j,
        "text": "héllo",
        "nested": {1: {"x": [tp.ones(2), (tp.zeros(1), "y")]}, (2, "k"): None, None: 1},
        "size": tp.Size([2, 3]),
        "dtype": tp.bfloat16,
        "device": tp.device("cpu"),
        "od": OrderedDict([("b", 1), ("a", 2)]),
        "empty": ({}, [], ()),
    }
    back = _roundtrip(obj, tmp_path)
    assert list(back) == list(obj)
    assert back["none"] is None and back["flags"] == [True, False]
    assert back["ints"] == (0, -3, 2**70) and type(back["ints"]) is tuple
    assert back["floats"][:2] == [1.5, -0.0] and math.copysign(1, back["floats"][1]) == -1
    assert back["floats"][2:] == [float("inf"), float("-inf")]
    assert back["complex"] == 2 - 3j and back["text"] == "héllo"
    nested = back["nested"]
    assert list(nested) == [1, (2, "k"), None] and nested[None] == 1
    x = nested[1]["x"]
    assert type(x) is list and type(x[1]) is tuple and x[1][1] == "y"
    _same_tensor(tp.ones(2), x[0])
    _same_tensor(tp.zeros(1), x[1][0])
    assert type(back["size"]) is tp.Size and back["size"] == (2, 3)
    assert back["dtype"] is tp.bfloat16 and back["device"] == tp.device("cpu")
    assert type(back["od"]) is OrderedDict and list(back["od"].items()) == [("b", 1), ("a", 2)]
    assert back["empty"] == ({}, [], ())
    nan = _roundtrip([float("nan")], tmp_path, "nan.safetensors")
    assert math.isnan(nan[0])


def test_requires_grad_and_parameter_mark_survive(tmp_path):
    p = nn.Parameter(tp.ones(3))
    frozen = nn.Parameter(tp.ones(2), requires_grad=False)
    leaf = tp.ones(2, requires_grad=True)
    back = _roundtrip({"p": p, "frozen": frozen, "leaf": leaf, "plain": tp.ones(1)}, tmp_path)
    assert isinstance(back["p"], nn.Parameter) and back["p"].requires_grad
    assert isinstance(back["frozen"], nn.Parameter) and not back["frozen"].requires_grad
    assert not isinstance(back["leaf"], nn.Parameter) and back["leaf"].requires_grad
    assert back["leaf"].is_leaf and not back["plain"].requires_grad


def test_module_state_dict_roundtrip_loads_into_a_fresh_module(tmp_path):
    model = _mlp(0)
    sd = model.state_dict()
    back = _roundtrip(sd, tmp_path)
    assert type(back) is OrderedDict and list(back) == list(sd)
    assert back._metadata == sd._metadata  # per-module versions, read by load_state_dict
    for k in sd:
        _same_tensor(sd[k], back[k])
    fresh = _mlp(1)
    fresh.load_state_dict(back)
    x = tp.randn(5, 6)
    np.testing.assert_array_equal(_np(fresh(x)), _np(model(x)))


def test_optimizer_state_dict_roundtrip_resumes_identically(tmp_path):
    def make():
        m = _mlp(0)
        opt = AdamW(
            [
                {"params": [m[0].weight, m[0].bias], "weight_decay": 0.1},
                {"params": list(m[2].parameters()), "lr": 0.01},
            ],
            lr=0.05,
            betas=(0.8, 0.99),
        )
        return m, opt

    def train(m, opt, steps, seed):
        tp.manual_seed(seed)
        for _ in range(steps):
            opt.zero_grad()
            m(tp.randn(4, 6)).pow(2).mean().backward()
            opt.step()

    m, opt = make()
    train(m, opt, 3, seed=1)
    sd = opt.state_dict()
    back = _roundtrip({"model": m.state_dict(), "optim": sd, "epoch": 3}, tmp_path)
    osd = back["optim"]
    assert osd["param_groups"] == sd["param_groups"]  # tuples, bools, None, index lists
    assert type(osd["param_groups"][0]["betas"]) is tuple
    assert sorted(osd["state"]) == [0, 1, 2, 3]
    for i, st in sd["state"].items():
        assert set(osd["state"][i]) == set(st)
        for k, v in st.items():
            _same_tensor(v, osd["state"][i][k])
    assert osd["state"][0]["step"].item() == 3.0

    m2, opt2 = make()
    m2.load_state_dict(back["model"])
    opt2.load_state_dict(osd)
    train(m, opt, 2, seed=7)
    train(m2, opt2, 2, seed=7)
    for (k, a), b in zip(m.state_dict().items(), m2.state_dict().values()):
        np.testing.assert_array_equal(_np(a), _np(b), err_msg=k)
    assert opt2.state[m2[0].weight]["step"].item() == 5.0


def test_sgd_momentum_state_with_none_buffers(tmp_path):
    m = _mlp(0)
    opt = SGD(m.parameters(), lr=0.1, momentum=0.9)
    m(tp.randn(2, 6)).sum().backward()
    opt.step()
    sd = opt.state_dict()
    back = _roundtrip(sd, tmp_path)
    assert back["param_groups"] == sd["param_groups"]
    for i, st in sd["state"].items():
        _same_tensor(st["momentum_buffer"], back["state"][i]["momentum_buffer"])


def test_file_objects_and_tp_attributes(tmp_path):
    buf = io.BytesIO()
    tp.save({"w": tp.full((2,), 7.0)}, buf)
    buf.seek(0)
    out = tp.load(buf)
    assert out["w"].tolist() == [7.0, 7.0]
    import tensorplay.serialization as ser

    assert tp.save is ser.save and tp.load is ser.load
    with open(tmp_path / "f.safetensors", "wb") as fh:
        tp.save([tp.ones(1)], fh)
    with open(tmp_path / "f.safetensors", "rb") as fh:
        assert tp.load(fh)[0].tolist() == [1.0]


def test_missing_distribution_error_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorplay.serialization", None)  # as if not installed
    with pytest.raises(ImportError, match=r"tensorplay.save needs the tensorplay-nn distribution"):
        tp.save  # noqa: B018
    with pytest.raises(ImportError, match=r"pip install ./packages/tensorplay-nn"):
        tp.load  # noqa: B018


def test_file_is_plain_safetensors_with_dotted_keys(tmp_path):
    path = tmp_path / "m.safetensors"
    a, b = tp.ones(2), tp.zeros(3)
    obj = {"model": {"fc.weight": a}, "state": {0: {"exp_avg": b}}, "a.b": a, "a": {"b": b}}
    tp.save(obj, path)
    arrays = safetensors.numpy.load_file(str(path))  # any safetensors reader sees the tensors
    assert set(arrays) == {"model.fc.weight", "state.0.exp_avg", "a.b", "a.b#2"}
    np.testing.assert_array_equal(arrays["a.b#2"], np.zeros(3, np.float32))
    back = tp.load(path)  # the colliding names still load where they were
    assert back["a.b"].tolist() == [1.0, 1.0] and back["a"]["b"].tolist() == [0.0] * 3
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    json.loads(header["__metadata__"]["tensorplay.structure"])  # strict JSON: no NaN tokens


def test_plain_safetensors_file_loads_as_a_flat_dict(tmp_path):
    path = tmp_path / "np.safetensors"
    safetensors.numpy.save_file(
        {"b": np.arange(3, dtype=np.int32), "a": np.ones((2, 2), np.float64)}, str(path)
    )
    out = tp.load(path)
    assert set(out) == {"a", "b"}
    assert out["b"].dtype is tp.int32 and out["b"].tolist() == [0, 1, 2]
    assert out["a"].dtype is tp.float64 and out["a"].shape == (2, 2)


# ---- map_location -----------------------------------------------------------------------------


def _fake_cuda_checkpoint(path):
    """A checkpoint as a CUDA machine writes it (tensor device "cuda:0")."""
    tree = {"type": "dict", "items": [["w", {"type": "tensor", "key": "w", "dtype": "float32"}]]}
    tree["items"][0][1]["device"] = "cuda:0"
    safetensors.numpy.save_file(
        {"w": np.arange(3, dtype=np.float32)},
        str(path),
        metadata={"tensorplay.format": "1", "tensorplay.structure": json.dumps(tree)},
    )


def test_map_location_forms(tmp_path):
    path = tmp_path / "cuda.safetensors"
    _fake_cuda_checkpoint(path)
    for ml in ("cpu", tp.device("cpu"), {"cuda:0": "cpu"}):
        out = tp.load(path, map_location=ml)
        assert out["w"].device == tp.device("cpu") and out["w"].tolist() == [0.0, 1.0, 2.0]
    seen = []

    def fn(t, location):
        seen.append(location)
        return t * 2

    assert tp.load(path, map_location=fn)["w"].tolist() == [0.0, 2.0, 4.0]
    assert seen == ["cuda:0"]
    with pytest.raises(TypeError, match="map_location=.*returned int"):
        tp.load(path, map_location=lambda t, loc: 3)
    if not tp.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available.*map_location='cpu'"):
            tp.load(path)


def test_weights_only_is_accepted_and_checked(tmp_path):
    path = tmp_path / "w.safetensors"
    tp.save({"w": tp.ones(1)}, path)
    assert tp.load(path, weights_only=False)["w"].tolist() == [1.0]
    with pytest.raises(TypeError, match="weights_only="):
        tp.load(path, weights_only="yes")


# ---- errors -----------------------------------------------------------------------------------


def test_unsaveable_objects_name_their_path(tmp_path):
    class Thing:
        pass

    with pytest.raises(TypeError, match=r"obj\['a'\]\[1\] of type .*Thing.*state_dict"):
        tp.save({"a": [1, Thing()]}, tmp_path / "x.safetensors")
    with pytest.raises(TypeError, match="tensor in a dict key"):
        tp.save({(tp.ones(1),): 1}, tmp_path / "x.safetensors")
    with pytest.raises(TypeError, match="of type numpy.float32"):
        tp.save([np.float32(1.0)], tmp_path / "x.safetensors")
    with pytest.raises(TypeError, match=r"tp.save\(f=\)"):
        tp.save({}, 3)


@pytest.mark.parametrize(
    "content, hint",
    [
        (b"", "too short"),
        (b"hello, this is not a checkpoint at all", "not a safetensors file"),
        (b"PK\x03\x04" + b"\0" * 60, "torch.save"),
        (b"\x80\x02}q\x00." + b"\0" * 20, "torch.save"),
    ],
    ids=["empty", "text", "torch-zip", "pickle"],
)
def test_not_a_checkpoint_names_the_file(content, hint, tmp_path):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(RuntimeError, match=hint) as err:
        tp.load(path)
    assert str(path) in str(err.value)


def test_truncated_checkpoint_raises_and_module_is_untouched(tmp_path):
    model = _mlp(0)
    path = tmp_path / "ckpt.safetensors"
    tp.save(_mlp(1).state_dict(), path)
    before = {k: _np(v).copy() for k, v in model.state_dict().items()}
    raw = path.read_bytes()
    for cut in (len(raw) - 1, len(raw) // 2, 12):
        (tmp_path / "cut.safetensors").write_bytes(raw[:cut])
        with pytest.raises(RuntimeError, match=r"cut\.safetensors.*truncated or corrupt"):
            model.load_state_dict(tp.load(tmp_path / "cut.safetensors"))
    # a whole file whose shapes do not fit loads nothing either
    tp.save({"0.weight": tp.ones(8, 6), "0.bias": tp.ones(5)}, path)
    with pytest.raises(RuntimeError, match="size mismatch for 0.bias"):
        model.load_state_dict(tp.load(path), strict=False)
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(_np(v), before[k], err_msg=k)


@pytest.mark.parametrize(
    "structure, message",
    [
        ('{"type": "float", "value": "1e400"}', "not nan, inf or -inf"),
        ('{"type": "complex", "real": "a", "imag": 1}', "no real and imag numbers"),
        ('{"type": "dict", "items": [[{"type": "list", "items": []}, 1]]}', "cannot be a key"),
        ('{"type": "dict", "items": [[1]]}', "not a \\[key, value\\] pair"),
        ('{"type": "tensor", "key": "nope", "dtype": "float32", "device": "cpu"}', "not stored"),
        ('{"type": "pickle"}', "unknown entry type 'pickle'"),
        ("[1, 2]", "unexpected structure entry"),
        ("{not json", "not JSON"),
    ],
)
def test_hand_made_structures_are_refused(structure, message, tmp_path):
    path = tmp_path / "hand.safetensors"
    meta = {"tensorplay.format": "1", "tensorplay.structure": structure}
    safetensors.numpy.save_file({"w": np.ones(1, np.float32)}, str(path), metadata=meta)
    with pytest.raises(RuntimeError, match=rf"hand\.safetensors.*corrupt.*{message}"):
        tp.load(path)


def test_corrupt_structure_and_unsupported_dtype_are_named(tmp_path):
    path = tmp_path / "c.safetensors"
    safetensors.numpy.save_file(
        {"w": np.ones(1, np.float32)},
        str(path),
        metadata={"tensorplay.format": "1", "tensorplay.structure": '{"type": "tensor"}'},
    )
    with pytest.raises(RuntimeError, match=r"c\.safetensors.*corrupt.*'key'"):
        tp.load(path)
    safetensors.numpy.save_file(
        {"w": np.ones(1, np.float32)},
        str(path),
        metadata={"tensorplay.format": "99", "tensorplay.structure": "null"},
    )
    with pytest.raises(RuntimeError, match="format version '99'.*upgrade tensorplay-nn"):
        tp.load(path)
    safetensors.numpy.save_file({"u": np.ones(2, np.uint16)}, str(path))
    with pytest.raises(RuntimeError, match=r"tensor 'u' .* dtype U16"):
        tp.load(path)
    with pytest.raises(TypeError, match="mode 'rb'"):
        tp.load(io.StringIO("text"))


# ---- torch interop ----------------------------------------------------------------------------


@needs_torch
def test_torch_written_state_dict_loads_into_tensorplay_mlp(tmp_path):
    import safetensors.torch

    torch.manual_seed(0)
    tmodel = torch.nn.Sequential(
        torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)
    ).double()
    path = tmp_path / "torch.safetensors"
    safetensors.torch.save_file(tmodel.state_dict(), str(path))
    model = _mlp(5).double()
    result = model.load_state_dict(tp.load(path))
    assert result.missing_keys == [] and result.unexpected_keys == []
    x = np.random.default_rng(0).standard_normal((4, 6))
    with torch.no_grad():
        expected = tmodel(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(_np(model(tp.tensor(x))), expected, rtol=1e-12, atol=1e-12)


@needs_torch
def test_tensorplay_checkpoint_reads_in_torch(tmp_path):
    import safetensors.torch

    model = _mlp(3)
    path = tmp_path / "tp.safetensors"
    tp.save(model.state_dict(), path)
    tmodel = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    tmodel.load_state_dict(safetensors.torch.load_file(str(path)))
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    with torch.no_grad():
        expected = tmodel(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(_np(model(tp.tensor(x))), expected, rtol=1e-6, atol=1e-6)


@needs_torch
def test_bfloat16_from_torch(tmp_path):
    import safetensors.torch

    t = torch.randn(3, 5).to(torch.bfloat16)
    path = tmp_path / "bf16.safetensors"
    safetensors.torch.save_file({"w": t, "h": t.half()}, str(path))
    out = tp.load(path)
    assert out["w"].dtype is tp.bfloat16 and out["h"].dtype is tp.float16
    np.testing.assert_array_equal(_np(out["w"].float()), t.float().numpy())
    np.testing.assert_array_equal(_np(out["h"]), t.half().numpy())
    back = tmp_path / "bf16_tp.safetensors"
    tp.save(out, back)
    assert torch.equal(safetensors.torch.load_file(str(back))["w"], t)


# ---- CUDA -------------------------------------------------------------------------------------


@pytest.mark.cuda
def test_cuda_tensors_roundtrip_to_their_device_or_map_location(tmp_path):
    if not tp.cuda.is_available():
        pytest.skip(f"CUDA not available: {tp.cuda.unavailable_reason()}")
    model = _mlp(0).to("cuda")
    opt = AdamW(model.parameters(), lr=0.1)
    model(tp.randn(2, 6, device="cuda")).sum().backward()
    opt.step()
    path = tmp_path / "cuda.safetensors"
    tp.save(
        {
            "model": model.state_dict(),
            "optim": opt.state_dict(),
            "bf": tp.ones(3, 2).to(device="cuda", dtype=tp.bfloat16).t(),
        },
        path,
    )
    back = tp.load(path)
    for k, v in model.state_dict().items():
        assert back["model"][k].device.type == "cuda"
        _same_tensor(v, back["model"][k])
    _same_tensor(opt.state_dict()["state"][0]["exp_avg"], back["optim"]["state"][0]["exp_avg"])
    assert back["bf"].dtype is tp.bfloat16 and back["bf"].shape == (2, 3)
    on_cpu = tp.load(path, map_location="cpu")
    assert all(v.device.type == "cpu" for v in on_cpu["model"].values())
    fresh = _mlp(1)
    fresh.load_state_dict(on_cpu["model"])
    x = tp.randn(3, 6)
    np.testing.assert_allclose(_np(fresh(x)), _np(model(x.to("cuda"))), rtol=1e-5, atol=1e-6)
