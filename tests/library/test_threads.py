"""8 threads defining, registering and calling operators at once: no errors, no lost
registrations, exactly one winner per contested name."""

from __future__ import annotations

import sys
import threading

import pytest

import tensorplay as tp
from tensorplay import library

N_THREADS = 8
OPS_PER_THREAD = 25


def _run_threads(target) -> list:
    errors: list = []
    barrier = threading.Barrier(N_THREADS)

    def wrapped(i):
        try:
            barrier.wait()
            target(i)
        except BaseException as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(N_THREADS)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show up
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    return errors


def test_define_register_and_call_concurrently(qualname):
    prefix = qualname("x").split("::")[0]
    shared = library.custom_op(f"{prefix}::shared", lambda x: x * 0)

    def work(i):
        for j in range(OPS_PER_THREAD):
            name = f"{prefix}_{i}::op{j}"
            op = library.custom_op(name, lambda x, k=j: x + k)
            op.register_fake(lambda x: x.new_empty(x.shape))
            op.register_kernel("cpu", lambda x, k=j: x * 0 + (k + 1000))
            op.register_autograd(lambda ctx, g: (g, None))  # inputs: x and k
            x = tp.ones(2, requires_grad=True)
            y = op(x)
            assert y.tolist() == [j + 1000.0] * 2
            y.sum().backward()
            assert x.grad.tolist() == [1.0, 1.0]
            # everybody hot-swaps and calls the shared op: any published kernel is whole
            shared.register_kernel("cpu", lambda x, v=i: x * 0 + v)
            assert shared(tp.ones(1)).item() in range(N_THREADS)

    errors = _run_threads(work)
    assert errors == []
    for i in range(N_THREADS):
        for j in range(OPS_PER_THREAD):
            op = library.get_op(f"{prefix}_{i}::op{j}")
            assert op(tp.zeros(1)).tolist() == [j + 1000.0]
            assert getattr(getattr(tp.ops, f"{prefix}_{i}"), f"op{j}") is op


def test_one_winner_per_contested_name(qualname):
    name = qualname("contested")
    won, lost = [], []

    def work(i):
        try:
            library.custom_op(name, lambda x, v=i: x * 0 + v)
            won.append(i)
        except RuntimeError as e:
            assert "already defined" in str(e)
            lost.append(i)

    assert _run_threads(work) == []
    assert len(won) == 1 and len(lost) == N_THREADS - 1
    assert library.get_op(name)(tp.zeros(1)).item() == won[0]


def test_set_kernel_enabled_and_calls_from_many_threads(qualname):
    op = library.custom_op(qualname(), lambda x: x * 0 + 1)
    op.register_kernel("cpu", lambda x: x * 0 + 2)

    def work(i):
        for j in range(50):
            if j % 2:
                assert op(tp.zeros(1)).item() == 2.0  # the main thread's block is not theirs
            else:
                with op.set_kernel_enabled("cpu", False):
                    assert op(tp.zeros(1)).item() == 1.0

    with op.set_kernel_enabled("cpu", False):
        assert _run_threads(work) == []
        assert op(tp.zeros(1)).item() == 1.0
    assert op(tp.zeros(1)).item() == 2.0


def test_set_kernel_enabled_affects_only_the_calling_thread(qualname):
    # Two threads, deterministically interleaved (events): A disables, B disables, A leaves
    # its block while B is still inside, then B leaves. Saving and restoring one global
    # state, B ran the CPU kernel inside its block and the kernel stayed disabled after.
    op = library.custom_op(qualname(), lambda x: x * 0 + 1)  # the agnostic kernel: 1
    op.register_kernel("cpu", lambda x: x * 0 + 2)  # the CPU kernel: 2
    a_inside, b_inside, a_left = threading.Event(), threading.Event(), threading.Event()
    seen: dict = {}

    def call() -> float:
        return op(tp.zeros(1)).item()

    def thread_a():
        with op.set_kernel_enabled("cpu", False):
            seen["a in block"] = call()
            a_inside.set()
            b_inside.wait(5)
            seen["a in block, b in block"] = call()
        seen["a after"] = call()
        a_left.set()

    def thread_b():
        a_inside.wait(5)
        seen["b, a in block"] = call()
        with op.set_kernel_enabled("cpu", False):
            b_inside.set()
            a_left.wait(5)
            seen["b in block, a left"] = call()
            with pytest.raises(LookupError, match="disabled"):
                library.get_kernel(op, "cpu")
        seen["b after"] = call()

    threads = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
    for t in threads:
        t.start()
    a_inside.wait(5)
    seen["main, a in block"] = call()
    for t in threads:
        t.join(10)
    assert seen == {
        "a in block": 1.0,
        "main, a in block": 2.0,
        "b, a in block": 2.0,
        "a in block, b in block": 1.0,
        "a after": 2.0,
        "b in block, a left": 1.0,
        "b after": 2.0,
    }
    assert call() == 2.0 and library.get_kernel(op, "cpu")(tp.zeros(1)).item() == 2.0
    assert op._table is op._full  # no block live: calls are back on the fast path


def test_set_kernel_enabled_nests_within_a_thread(qualname):
    op = library.custom_op(qualname(), lambda x: x * 0 + 1)
    op.register_kernel("cpu", lambda x: x * 0 + 2)
    with op.set_kernel_enabled("cpu", False):
        with op.set_kernel_enabled("cpu", True):
            assert op(tp.zeros(1)).item() == 2.0
        assert op(tp.zeros(1)).item() == 1.0
    assert op(tp.zeros(1)).item() == 2.0
