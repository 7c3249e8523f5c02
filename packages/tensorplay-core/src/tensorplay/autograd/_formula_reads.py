"""What a derivative formula reads, found from its signature and its bytecode.

Autograd saves, and unpacks in backward, only what an op's formulas read: an in-place
change of a tensor that no formula reads must not fail backward (``y = x * 2; y.mul_(3)``),
the contract PyTorch's derivatives.yaml gives by saving only what a formula names. Three
readers answer that question, for the three shapes a formula has:

- ``takes_out(d)``: does a partial derivative ``d(*inputs, out, **params)`` name ``out``,
  the op's result (then the result is saved)?
- ``reads(d)``: which of its positional parameters (the op's inputs) does its body load?
- ``tensorplay.autograd._record._reads_ctx(vjp, attr)``: can a whole formula
  ``vjp(ctx, grad)`` read ``ctx.out`` (``ctx.inputs``)? It lives beside the recorder that
  asks it (the question is about ``ctx``, not about parameters) and uses ``local_names``
  from here.

``local_names`` is the one place that knows how bytecode names local variables.
"""

from __future__ import annotations

import dis
import functools
import inspect

_LOCAL_OPS = frozenset(dis.haslocal) | frozenset(dis.hasfree)


def local_names(ins: dis.Instruction) -> tuple:
    """The local (or cell) variables bytecode instruction ``ins`` names, in stack order.

    Usually one; Python 3.13's superinstructions name two in a tuple
    (``LOAD_FAST_LOAD_FAST (b, a)`` pushes b, then a). ``dis``'s own tables say which
    opcodes touch locals, so this holds for every interpreter without listing opnames.
    """
    if ins.opcode not in _LOCAL_OPS:
        return ()
    return ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)


@functools.cache
def takes_out(fn) -> bool:
    """Does a derivative formula name ``out`` (the op's result) among its parameters? Only
    then is the saved result read: reading it checks that no in-place op changed it since,
    and a formula that does not need it must not fail that check (``y = x * 2; y.mul_(3)``)."""
    return "out" in inspect.signature(fn).parameters


@functools.cache
def reads(fn) -> tuple:
    """For each positional parameter of a derivative formula: does its body read it?

    A formula gets only the saved inputs it reads (``mul``'s d/da is ``b``: ``a`` is not
    unpacked), so an in-place change of an unread input does not fail backward: the
    same contract PyTorch's derivatives.yaml gives by saving only what a formula names.
    A closure capturing a parameter loads it too (``LOAD_CLOSURE``), so it counts.
    """
    code = fn.__code__
    names = code.co_varnames[: code.co_argcount]
    loaded = {
        name
        for ins in dis.get_instructions(fn)
        if "LOAD" in ins.opname
        for name in local_names(ins)
    }
    return tuple(n in loaded for n in names)
