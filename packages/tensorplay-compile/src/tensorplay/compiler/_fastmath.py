"""Vectorisable float32 exp, tanh, erf (and what is built on them) as TIR expressions.

TVM lowers ``exp``/``tanh`` to scalar libm calls, which LLVM cannot vectorise: a fused
kernel full of them loses to numpy. These are polynomial/rational approximations made
of +, *, /, floor, min/max and bit casts only, so a vectorised loop stays vectorised.
Accuracy (float32, checked against numpy in tests/compile/test_fastmath.py): a few ulp.

Each takes a PrimExpr and binds it once with ``Let`` so the argument is computed once
however often the formula reads it. Inside ``hoisted(build)`` those bindings are not
nested in the formula but placed around the whole expression ``build`` returns (what a
kernel must do; see ``hoisted``).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["FastMath"]


class FastMath:
    """The formulas, built against a loaded ``tvm`` (imported lazily by the backend)."""

    def __init__(self, tvm: ModuleType) -> None:
        self.tirx = tvm.tirx
        self.te = tvm.te
        self._bindings: list | None = None  # collected by hoisted(), else None

    def _c(self, v: float) -> Any:
        return self.tirx.const(v, "float32")

    def _let(self, name: str, value: Any, body: Callable[[Any], Any]) -> Any:
        var = self.tirx.Var(name, "float32")
        if self._bindings is None:
            return self.tirx.Let(var, value, body(var))
        self._bindings.append((var, value))
        return body(var)

    def hoisted(self, build: Callable[[], Any]) -> Any:
        """``build()`` with every ``Let`` its formulas bind moved around the whole result.

        NOTE: TVM's loop vectorizer visits both operands of a product twice when one of
        them changes but stays scalar (a broadcast operand), and a ``Let`` seen twice fails
        its check "Let cannot bind the same var to two different values". A chain of
        ``Let`` s at the top of the expression is visited once. Values only read earlier
        bindings, so the chain keeps the order they were made in.
        """
        outer, self._bindings = self._bindings, []
        try:
            expr = build()
            for var, value in reversed(self._bindings):
                expr = self.tirx.Let(var, value, expr)
        finally:
            self._bindings = outer
        return expr

    def _poly(self, x: Any, coeffs: tuple) -> Any:
        """Horner: coeffs[0] * x**(n-1) + ... + coeffs[-1]."""
        acc = self._c(coeffs[0])
        for c in coeffs[1:]:
            acc = acc * x + self._c(c)
        return acc

    def exp(self, x: Any) -> Any:
        """exp(x) = 2**n * e**f with n = round(x / ln 2) and a degree-7 polynomial for e**f
        (Cephes' expf, the split TVM's ``topi.fast_exp`` also uses)."""
        te, tirx = self.te, self.tirx
        hi, lo = self._c(88.72283935546875), self._c(-103.97207708)

        def body(v: Any) -> Any:
            n = te.floor(v * self._c(1.44269504088896341) + self._c(0.5))

            def with_n(n_: Any) -> Any:
                # ln 2 split in two so that v - n*ln2 stays exact for large n
                f = v - n_ * self._c(0.693359375) + n_ * self._c(2.12194440e-4)

                def with_f(f_: Any) -> Any:
                    p = self._poly(
                        f_,
                        (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                         4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1),
                    )  # fmt: skip
                    p = p * f_ * f_ + f_ + self._c(1.0)
                    # 2**n from exponent bits ((k + 127) << 23), in two halves so that n in
                    # [-150, 128] never leaves the normal range: 2**128 (x near 88.7) and
                    # 2**-150 (subnormal results) both come out right
                    k = n_.astype("int32")
                    half = k >> 1
                    return p * self._pow2(half) * self._pow2(k - half)

                return self._let("ef", f, with_f)

            return self._let("en", n, with_n)

        def edges(v: Any) -> Any:
            # NOTE: the clamp keeps the bit trick in range; the selects restore what it would
            # change: overflow is +inf (as in libm) and NaN stays NaN (max/min drop it)
            approx = self._let("ex", te.max(te.min(v, hi), lo), body)
            return tirx.Select(tirx.isnan(v), v, tirx.Select(v > hi, self._c(float("inf")), approx))

        return self._let("exv", x, edges)

    def _pow2(self, k: Any) -> Any:
        """2.0**k for an int32 k in [-126, 127], assembled in the exponent bits."""
        return self.tirx.reinterpret("float32", (k + 127) << 23)

    def tanh(self, x: Any) -> Any:
        """tanh as a rational function on [-7.9, 7.9] (Eigen's ``ptanh`` coefficients; beyond
        it tanh rounds to +-1 in float32); tiny
        |x| returns x itself, where the rational form's rounding would dominate."""
        te, tirx = self.te, self.tirx

        def body(v: Any) -> Any:
            def with_sq(x2: Any) -> Any:
                p = self._poly(
                    x2,
                    (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                     5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                     4.89352455891786e-03),
                ) * v  # fmt: skip
                q = self._poly(
                    x2,
                    (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                     4.89352518554385e-03),
                )  # fmt: skip
                return p / q

            approx = self._let("tx2", v * v, with_sq)
            return tirx.Select(te.abs(v) < self._c(4e-4), v, approx)

        def nan_safe(v: Any) -> Any:
            clamped = self._let(
                "tx",
                te.max(te.min(v, self._c(7.90531110763549805)), self._c(-7.90531110763549805)),
                body,
            )
            return tirx.Select(tirx.isnan(v), v, clamped)

        return self._let("txv", x, nan_safe)

    def erf(self, x: Any) -> Any:
        """erf as a rational function on [-4, 4] (Eigen's ``perf`` coefficients)."""
        te, tirx = self.te, self.tirx

        def body(v: Any) -> Any:
            def with_sq(x2: Any) -> Any:
                p = self._poly(
                    x2,
                    (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
                     -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
                     -1.60960333262415e-02),
                ) * v  # fmt: skip
                q = self._poly(
                    x2,
                    (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
                     -7.37332916720468e-03, -1.42647390514189e-02),
                )  # fmt: skip
                return p / q

            return self._let("rx2", v * v, with_sq)

        def nan_safe(v: Any) -> Any:
            clamped = self._let("rx", te.max(te.min(v, self._c(4.0)), self._c(-4.0)), body)
            return tirx.Select(tirx.isnan(v), v, clamped)

        return self._let("rxv", x, nan_safe)

    def sigmoid(self, x: Any) -> Any:
        """1 / (1 + exp(-x)): exp saturates at +-88, so no overflow to inf or nan."""
        return self._c(1.0) / (self._c(1.0) + self.exp(-x))
