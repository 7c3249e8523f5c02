"""Build tests/cppjit/exchange_reference.cc and put it on tp.Tensor (test double for the
native table tensorplay._C is to provide). Used by test_native_exchange.py and by
tools/bench/cppjit.py, in subprocesses only: tvm-ffi caches the argument converter it
picked per type, so the table must be installed before the first kernel call."""

from __future__ import annotations

import ctypes
import sysconfig
from pathlib import Path

import numpy as np

import tensorplay as tp
from tensorplay.utils import cpp_jit

SOURCE = Path(__file__).with_name("exchange_reference.cc")


def install() -> None:
    if hasattr(tp.Tensor, "__dlpack_c_exchange_api__"):
        return  # the real one from tensorplay._C is there: use it
    lib = cpp_jit.build(
        "tp_exchange_reference",
        cpp_files=[str(SOURCE)],
        extra_include_paths=[sysconfig.get_paths()["include"], np.get_include()],
    )
    dll = ctypes.PyDLL(lib)
    fn = dll.tp_reference_exchange_api
    fn.restype = ctypes.c_void_p
    addr = fn()
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    tp.Tensor.__dlpack_c_exchange_api__ = new_capsule(addr, b"dlpack_exchange_api", None)
    tp.Tensor._cppjit_reference_dll = dll  # keep the library loaded
