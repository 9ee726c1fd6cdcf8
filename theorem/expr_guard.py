"""Hostile-input guards for the symbolic side: bounded numbers and a safe expression parser.

Everything here is a deterministic *work limit*: it refuses or gives up by the size of the
input, never by the clock, so the same input gets the same answer on a loaded machine and
an idle one.

* ``exact_number(text, where)``: a decimal (``0.3``, ``1e-3``) or fraction (``3/10``) as an
  exact ``Fraction``, with at most ``MAX_DIGITS`` digits and a decimal exponent of at most
  ``MAX_EXPONENT`` in absolute value (``1e999999999`` would be an integer of a billion digits);
* ``parse(text, where, names)``: an expression in ``t`` built from a Python AST walk with an
  allow-list: numbers, ``t``, the names in ``FUNCTIONS`` (called with one argument), parameter
  names, ``+ - * / ** ^`` and parentheses. No attribute access, subscripts, strings, keywords,
  lambdas or any other Python construct. Integer literals have at most ``MAX_DIGITS`` digits;
  every constant sub-expression is evaluated (bounded) before SymPy sees it and must stay
  within 10^±``MAX_CONSTANT_LOG10``; numeric exponents are at most ``MAX_POWER`` in absolute
  value, numeric factorial/gamma arguments at most ``MAX_FACTORIAL``, and factorial/gamma may
  not be nested (each level is a tower of exponentials);

The parser bounds constants with posbias.theorem.bounded_eval's ``approx`` (the magnitude-capped
evaluator), whose symbol ``T`` (t) it builds expressions in.

Examples
--------
>>> exact_number("0.3", "demo")
Fraction(3, 10)
>>> exact_number("1e999999999", "demo")
Traceback (most recent call last):
...
posbias.theorem.errors.DeriveError: demo: '1e999999999' has a decimal exponent beyond ±60;
expected a number like 0.3, 3/10 or 1e-3
>>> parse("0.5/(t+1)^1.5", "demo")
1/(2*(t + 1)**(3/2))
>>> parse("t.__class__", "demo")
Traceback (most recent call last):
...
posbias.theorem.errors.DeriveError: demo: 't.__class__' uses attribute access, which is not allowed;
expected an expression in t such as 0.5/(t+1)**1.5
"""

from __future__ import annotations

import ast
import functools
import keyword
import re
from fractions import Fraction

import mpmath
import sympy as sp

from posbias.theorem.bounded_eval import MpReal, T, TooLarge, Unevaluable, approx
from posbias.theorem.errors import DeriveError

MAX_TEXT = 200  # characters of one expression
MAX_NODES = 80  # expression nodes (numbers, names, operations, calls) of one expression
MAX_DIGITS = 60  # digits of one literal
MAX_EXPONENT = 60  # |e| of a decimal literal 1.5e-7
MAX_POWER = 1000  # |exponent| of a power with a numeric exponent
MAX_FACTORIAL = 400  # numeric argument of factorial / gamma (400! is about 10^869)
MAX_CONSTANT_LOG10 = 1000  # every constant sub-expression lies in [10^-1000, 10^1000] (or is 0)

FUNCTIONS = {
    "exp": sp.exp,
    "log": sp.log,
    "sqrt": sp.sqrt,
    "sin": sp.sin,
    "cos": sp.cos,
    "tan": sp.tan,
    "atan": sp.atan,
    "Abs": sp.Abs,
    "abs": sp.Abs,
    "factorial": sp.factorial,
    "gamma": sp.gamma,
    "floor": sp.floor,
    "ceiling": sp.ceiling,
}
CONSTANTS = {"pi": sp.pi, "E": sp.E}
GROWTH = ("factorial", "gamma")  # may not be nested
_ALLOWED_TEXT = re.compile(r"^[A-Za-z0-9_+\-*/^(). ]+$")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_DECIMAL = re.compile(r"^[+-]?(?:(\d+)(?:\.(\d*))?|\.(\d+))(?:[eE]([+-]?\d+))?$")
_FRACTION = re.compile(r"^([+-]?\d+)\s*/\s*(\d+)$")
EXPECTED = "expected an expression in t such as 0.5/(t+1)**1.5"


# ----------------------------------------------------------------------------- numbers
def exact_number(text: str, where: str) -> Fraction:
    """``text`` (a decimal or ``p/q``) as an exact Fraction within the literal limits, else DeriveError."""
    src = text.strip()
    bad = f"{where}: {text!r}"
    expected = "expected a number like 0.3, 3/10 or 1e-3"
    m = _FRACTION.match(src)
    if m:
        if len(m.group(1).lstrip("+-")) > MAX_DIGITS or len(m.group(2)) > MAX_DIGITS:
            raise DeriveError(f"{bad} has more than {MAX_DIGITS} digits; {expected}")
        if int(m.group(2)) == 0:
            raise DeriveError(f"{bad} divides by zero; {expected}")
        return Fraction(int(m.group(1)), int(m.group(2)))
    m = _DECIMAL.match(src)
    if not m:
        raise DeriveError(f"{bad} is not a number; {expected}")
    digits = (m.group(1) or "") + (m.group(2) or "") + (m.group(3) or "")
    if len(digits) > MAX_DIGITS:
        raise DeriveError(f"{bad} has more than {MAX_DIGITS} digits; {expected}")
    exponent = m.group(4)
    if exponent is not None and (len(exponent.lstrip("+-")) > 4 or abs(int(exponent)) > MAX_EXPONENT):
        raise DeriveError(f"{bad} has a decimal exponent beyond ±{MAX_EXPONENT}; {expected}")
    return Fraction(src)


# ------------------------------------------------------------------------- the parser
def _refuse(text: str, where: str, why: str, expected: str = EXPECTED) -> DeriveError:
    return DeriveError(f"{where}: {text!r} {why}; {expected}")


def parse(
    text: str, where: str, positive_names: bool = True, variable: sp.Symbol = T, expected: str = EXPECTED
) -> sp.Expr:
    """An expression in ``T`` (and parameter names, positive symbols) under the allow-list above.

    ``variable``: the symbol the name of which is the free variable (default ``T``, named t; the
    bias expressions of posbias/bias_spec.py use g); ``expected``: the end of every refusal.
    Raises a one-line ``DeriveError`` for anything outside it; never evaluates an unbounded
    number (see the module docstring for the limits).
    """
    refuse = functools.partial(_refuse, expected=expected)
    src = text.strip()
    if not src:
        raise refuse(text, where, "is empty")
    if len(src) > MAX_TEXT:
        raise refuse(text, where, f"is longer than {MAX_TEXT} characters")
    if not _ALLOWED_TEXT.match(src):
        raise refuse(text, where, "contains characters other than letters, digits, + - * / ^ ( ) . and spaces")
    src = src.replace("^", "**")
    try:
        tree = ast.parse(src, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise refuse(text, where, "is not well formed") from None
    nodes = list(ast.walk(tree))
    if sum(isinstance(n, ast.expr) for n in nodes) > MAX_NODES:
        raise refuse(text, where, f"has more than {MAX_NODES} syntax nodes")
    for node in nodes:
        if isinstance(node, ast.Attribute):
            raise refuse(text, where, "uses attribute access, which is not allowed")
    builder = _Builder(text, src, where, positive_names, variable, expected)
    expr = builder.build(tree.body, inside_growth=False)
    if not isinstance(expr, sp.Expr) or expr.has(sp.zoo, sp.nan, sp.I, sp.oo, -sp.oo):
        raise refuse(text, where, "is not a finite real expression")
    return expr


class _Builder:
    """Walks the AST with the allow-list and builds the SymPy expression bottom-up (private)."""

    BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)

    def __init__(
        self, text: str, src: str, where: str, positive_names: bool, variable: sp.Symbol = T, expected: str = EXPECTED
    ):
        self.text, self.src, self.where, self.positive = text, src, where, positive_names
        self.variable, self.expected = variable, expected

    def refuse(self, why: str) -> DeriveError:
        return _refuse(self.text, self.where, why, self.expected)

    def build(self, node: ast.AST, inside_growth: bool) -> sp.Expr:
        if isinstance(node, ast.Constant):
            return self.literal(node)
        if isinstance(node, ast.Name):
            return self.name(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = self.build(node.operand, inside_growth)
            return -inner if isinstance(node.op, ast.USub) else inner
        if isinstance(node, ast.BinOp) and isinstance(node.op, self.BINOPS):
            left = self.build(node.left, inside_growth)
            right = self.build(node.right, inside_growth)
            return self.binop(node.op, left, right)
        if isinstance(node, ast.Call):
            return self.call(node, inside_growth)
        kind = type(node).__name__
        words = {
            "Lambda": "a lambda",
            "Subscript": "a subscript",
            "Compare": "a comparison",
            "BoolOp": "and/or",
            "IfExp": "an if-expression",
            "Tuple": "a tuple",
            "List": "a list",
            "Starred": "a star",
        }
        raise self.refuse(f"uses {words.get(kind, kind)}, which is not allowed")

    def literal(self, node: ast.Constant) -> sp.Expr:
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.refuse("contains a literal that is not a real number")
        seg = ast.get_source_segment(self.src, node) or repr(value)
        frac = exact_number(seg, f"{self.where}: in {self.text!r}, the number")
        return sp.Rational(frac.numerator, frac.denominator)

    def name(self, ident: str) -> sp.Expr:
        if ident == self.variable.name:
            return self.variable
        if ident in CONSTANTS:
            return CONSTANTS[ident]
        if ident in FUNCTIONS:
            raise self.refuse(f"uses the function {ident} without an argument")
        if not _NAME.match(ident) or "__" in ident or keyword.iskeyword(ident) or len(ident) > 30:
            raise self.refuse(f"uses the name {ident!r}, which is not allowed")
        return sp.Symbol(ident, positive=True) if self.positive else sp.Symbol(ident, real=True)

    def call(self, node: ast.Call, inside_growth: bool) -> sp.Expr:
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            what = node.func.id if isinstance(node.func, ast.Name) else "an expression"
            raise self.refuse(f"calls {what}, which is not one of {', '.join(sorted(FUNCTIONS))}")
        fname = node.func.id
        if node.keywords or len(node.args) != 1:
            raise self.refuse(f"calls {fname} with other than one plain argument")
        growth = fname in GROWTH
        if growth and inside_growth:
            raise self.refuse("nests factorial/gamma (a tower of factorials), which is not supported")
        arg = self.build(node.args[0], inside_growth or growth)
        func = FUNCTIONS[fname]
        if growth and not arg.free_symbols:
            val = self.constant(arg)
            if abs(val) > MAX_FACTORIAL:
                raise self.refuse(f"applies {fname} to a number above {MAX_FACTORIAL}")
        unevaluated = func(arg, evaluate=False) if fname != "sqrt" else sp.Pow(arg, sp.S.Half, evaluate=False)
        return self.finish(unevaluated, lambda: func(arg))

    def binop(self, op: ast.operator, left: sp.Expr, right: sp.Expr) -> sp.Expr:
        if isinstance(op, ast.Pow):
            if not right.free_symbols:
                e = self.constant(right)
                if abs(e) > MAX_POWER:
                    raise self.refuse(f"raises to a numeric power above {MAX_POWER} in absolute value")
            return self.finish(sp.Pow(left, right, evaluate=False), lambda: left**right)
        if isinstance(op, ast.Div):
            if not right.free_symbols and self.constant(right) == 0:
                raise self.refuse("divides by zero")
            return self.finish(sp.Mul(left, sp.Pow(right, -1, evaluate=False), evaluate=False), lambda: left / right)
        if isinstance(op, ast.Mult):
            return self.finish(sp.Mul(left, right, evaluate=False), lambda: left * right)
        if isinstance(op, ast.Add):
            return left + right
        return left - right

    def constant(self, expr: sp.Expr) -> MpReal:
        """The value of a constant (unevaluated) expression, within 10^±MAX_CONSTANT_LOG10, else refuse."""
        try:
            v = approx(expr, None)
        except (TooLarge, Unevaluable, ZeroDivisionError, ValueError, OverflowError):
            raise self.refuse("has a constant part that is too large or not a real number") from None
        if v != 0 and abs(mpmath.log10(abs(v))) > MAX_CONSTANT_LOG10:
            raise self.refuse(f"has a constant part beyond 10^±{MAX_CONSTANT_LOG10}")
        return v

    def finish(self, unevaluated: sp.Expr, evaluate) -> sp.Expr:
        """Check a constant node's size before SymPy evaluates it; then build it evaluated."""
        if not unevaluated.free_symbols:
            self.constant(unevaluated)
        try:
            return evaluate()
        except (ZeroDivisionError, ValueError, TypeError, OverflowError):
            raise self.refuse("cannot be evaluated") from None
