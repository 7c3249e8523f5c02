"""The CUDA launch replay (``tensorplay.kernels._fastlaunch``), checked on CPU.

The replay's job is bookkeeping: which call signatures may reuse a compiled kernel and in
what order the launcher gets its arguments. A stand-in compiled kernel records what it
is called with, so that bookkeeping is checked here without a GPU; the GPU tests
(``test_cuda_triton.py``) check real launches through it.
"""

from __future__ import annotations

import pytest

import tensorplay as tp

triton = pytest.importorskip("triton", reason="Triton is not installed")
tl = pytest.importorskip("triton.language")

from triton.runtime.jit import JITFunction  # noqa: E402

from tensorplay.kernels._fastlaunch import FastLauncher  # noqa: E402
from tensorplay.kernels._launch import Pointer  # noqa: E402

STREAM = 0x5EED


def _body(x_ptr, y_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr = 128):
    pass


class FakeCompiled:
    """What the replay reads of a ``CompiledKernel``: ``run``, ``function``, metadata."""

    function = 0xF00
    packed_metadata = ("meta",)

    def __init__(self):
        self.calls: list[tuple] = []

    def run(self, *args):
        self.calls.append(args)


class FakeCLauncher:
    """Triton's ``CudaLauncher``: the C ``launch`` function and what it is called with."""

    launch_cooperative_grid, launch_pdl = False, True

    def __init__(self, scratch: int):
        self.global_scratch_size = scratch
        self.profile_scratch_size = 0
        self.c_calls: list[tuple] = []
        self.py_calls: list[tuple] = []

    def launch(self, *args):
        self.c_calls.append(args)

    def __call__(self, *args):
        self.py_calls.append(args)


@pytest.mark.parametrize("scratch", [0, 256])
def test_kernels_without_scratch_go_straight_to_the_c_launcher(scratch):
    k = FakeCompiled()
    k.run = FakeCLauncher(scratch)
    fl = _launcher()
    x, y = tp.randn(64), tp.randn(64)
    fl.record(k, (x, y, 64), {"OP": "add"})
    assert fl.launch((4,), (x, y, 64), {"OP": "add"}) is k
    tail = (("meta",), None, None, None, x.data_ptr(), y.data_ptr(), 64, "add", 128)
    if scratch:  # Triton's Python launcher allocates the scratch, then calls C
        assert k.run.py_calls == [(4, 1, 1, STREAM, 0xF00) + tail] and not k.run.c_calls
    else:
        assert k.run.c_calls == [(4, 1, 1, STREAM, 0xF00, False, True, None, None) + tail]
        assert not k.run.py_calls


def _launcher(built=None, **kw):
    return FastLauncher(
        built if built is not None else JITFunction(_body),
        device=lambda: 0,
        stream=lambda: STREAM,
        pointer_type=Pointer,
        **kw,
    )


def test_unseen_signature_is_left_to_triton():
    fl = _launcher()
    x, y = tp.randn(64), tp.randn(64)
    assert fl.launch((4,), (x, y, 64), {"OP": "add"}) is None


def test_replay_passes_arguments_in_signature_order_with_defaults():
    fl, k = _launcher(), FakeCompiled()
    x, y = tp.randn(64), tp.randn(64)
    fl.record(k, (x, y, 64), {"OP": "add"})
    assert fl.launch((4,), (x, y, 64), {"OP": "add"}) is k
    assert k.calls == [
        (4, 1, 1, STREAM, 0xF00, ("meta",), None, None, None)
        + (x.data_ptr(), y.data_ptr(), 64, "add", 128)
    ]
    # other tensors and sizes of the same specialisation reuse it, with their own values
    u, v = tp.randn(32), tp.randn(32)
    assert fl.launch((2, 3), (u, v, 32), {"OP": "add"}) is k
    assert k.calls[-1][:3] == (2, 3, 1)
    assert k.calls[-1][9:] == (u.data_ptr(), v.data_ptr(), 32, "add", 128)


@pytest.mark.parametrize(
    "change",
    [
        "dtype",
        "misaligned",
        "n_not_multiple_of_16",
        "n_is_one",
        "n_int64",
        "n_uint64",
        "constexpr",
        "kwarg",
    ],
)
def test_a_different_specialisation_is_not_replayed(change):
    fl, k = _launcher(), FakeCompiled()
    x, y = tp.randn(64), tp.randn(64)
    fl.record(k, (x, y, 64), {"OP": "add"})
    args, kwargs = (x, y, 64), {"OP": "add"}
    if change == "dtype":
        args = (x.to(tp.float64), y.to(tp.float64), 64)
    elif change == "misaligned":  # 4 bytes in: Triton specialises on 16-byte alignment
        args = (tp.randn(65)[1:], y, 64)
    elif change == "n_not_multiple_of_16":
        args = (x, y, 17)
    elif change == "n_is_one":
        args = (x, y, 1)
    elif change == "n_int64":
        args = (x, y, 1 << 33)
    elif change == "n_uint64":
        fl.record(k, (x, y, 1 << 33), {"OP": "add"})  # i64 seen; u64 is another type
        args = (x, y, 1 << 63)
    elif change == "constexpr":
        kwargs = {"OP": "mul"}
    elif change == "kwarg":
        kwargs = {"OP": "add", "BLOCK": 256}
    assert fl.launch((1,), args, kwargs) is None
    assert k.calls == []


def test_pointers_and_unsupported_arguments():
    fl, k = _launcher(), FakeCompiled()
    p, q = Pointer(0x1000, tp.float32), Pointer(0x2000, tp.float32)
    fl.record(k, (p, q, 16), {"OP": "add"})
    assert fl.launch((1,), (p, Pointer(0x3000, tp.float32), 16), {"OP": "add"}) is k
    assert k.calls[-1][9:11] == (0x1000, 0x3000)
    # a list argument is outside what the replay describes: Triton's full path
    fl.record(k, (p, q, [16]), {"OP": "add"})
    assert fl.launch((1,), (p, q, [16]), {"OP": "add"}) is None


def test_launch_hooks_turn_the_replay_off():
    from triton import knobs

    fl, k = _launcher(), FakeCompiled()
    x, y = tp.randn(64), tp.randn(64)
    fl.record(k, (x, y, 64), {"OP": "add"})
    seen = []
    hook = seen.append
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        assert fl.launch((1,), (x, y, 64), {"OP": "add"}) is None
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert fl.launch((1,), (x, y, 64), {"OP": "add"}) is k
    fl.clear()
    assert fl.launch((1,), (x, y, 64), {"OP": "add"}) is None


def test_autotuned_replay_uses_the_chosen_config_per_key_value():
    tuned = triton.autotune(
        configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 256})], key=["n"]
    )(JITFunction(_body))
    fl, k = _launcher(tuned, tune_keys=("n",)), FakeCompiled()
    x, y = tp.randn(64), tp.randn(64)
    tuned.best_config = tuned.configs[1]  # what the autotuner's run leaves behind
    fl.record(k, (x, y, 64), {"OP": "add"})
    grids = []

    def grid(meta):
        grids.append(dict(meta))
        return (meta["n"] // meta["BLOCK"],)

    assert fl.launch(grid, (x, y, 64), {"OP": "add"}) is k
    assert k.calls[-1][0] == 64 // 256 and k.calls[-1][-1] == 256
    assert grids[-1]["BLOCK"] == 256 and grids[-1]["n"] == 64
    # another value of the autotuning key may have another best config: not replayed
    assert fl.launch(grid, (x, y, 80), {"OP": "add"}) is None
    # a config with a pre_hook must run through the autotuner every time
    tuned.best_config = triton.Config({"BLOCK": 64}, pre_hook=lambda args: None)
    fl.clear()
    fl.record(k, (x, y, 64), {"OP": "add"})
    assert fl.launch(grid, (x, y, 64), {"OP": "add"}) is None


def test_an_autotune_key_that_names_no_parameter_is_refused():
    # The launcher is given its keys separately from the autotuner (Triton >= 3.9 refuses an
    # unknown key in triton.autotune itself; older versions ignore it silently).
    tuned = triton.autotune(configs=[triton.Config({"BLOCK": 64})], key=["n"])(JITFunction(_body))
    with pytest.raises(ValueError, match=r"autotune key \['N'\] names no parameter.*x_ptr"):
        _launcher(tuned, tune_keys=("N",))
