"""Pure built-in tools that need no team, user or network: ``calculator`` and ``current_time``.

The calculator evaluates arithmetic by walking the parsed syntax tree; nothing is ever passed
to ``eval``. Only numbers, the operators ``+ - * / // % **`` (``^`` is read as a power), a few
math functions and the constants ``pi``, ``e`` and ``tau`` are allowed, and exponents and result
sizes are bounded so that no expression can exhaust memory or CPU.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from .tools import Tool, ToolResult

MAX_EXPRESSION_CHARS = 500
MAX_EXPONENT = 10_000
MAX_INT_BITS = 4_096  # about 1233 decimal digits
MAX_DEPTH = 300


class CalculatorError(ValueError):
    pass


_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs, "round": round, "min": min, "max": max,
    "sqrt": math.sqrt, "exp": math.exp, "log": math.log, "log10": math.log10, "log2": math.log2,
    "sin": math.sin, "cos": math.cos, "tan": math.tan,
    "asin": math.asin, "acos": math.acos, "atan": math.atan,
    "floor": math.floor, "ceil": math.ceil, "factorial": math.factorial,
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}
_MAX_FACTORIAL = 500


def _check_size(value: Any) -> Any:
    if isinstance(value, bool):
        raise CalculatorError("Booleans are not numbers here.")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise CalculatorError("The result is too large.")
    if isinstance(value, float) and math.isinf(value):
        raise CalculatorError("The result is too large.")
    if isinstance(value, float) and math.isnan(value):
        raise CalculatorError("The result is not a number.")
    return value


def _power(base: Any, exponent: Any) -> Any:
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"Exponents are limited to ±{MAX_EXPONENT}.")
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0:
        # The result has about bit_length(base) * exponent bits; refuse before computing it.
        if max(base.bit_length() - 1, 0) * exponent > MAX_INT_BITS:
            raise CalculatorError("The result is too large.")
    try:
        result = base ** exponent
    except OverflowError as exc:
        raise CalculatorError("The result is too large.") from exc
    except ZeroDivisionError as exc:
        raise CalculatorError("Division by zero.") from exc
    if isinstance(result, complex):
        raise CalculatorError("The result is not a real number.")
    return result


class _Evaluator:
    def evaluate(self, node: ast.AST, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise CalculatorError("The expression is nested too deeply.")
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise CalculatorError(f"Unsupported syntax: {type(node).__name__}.")
        return _check_size(method(node, depth + 1))

    def _Expression(self, node: ast.Expression, depth: int) -> Any:
        return self.evaluate(node.body, depth)

    def _Constant(self, node: ast.Constant, depth: int) -> Any:
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise CalculatorError(f"Unsupported value: {node.value!r}.")
        return node.value

    def _Name(self, node: ast.Name, depth: int) -> Any:
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise CalculatorError(f"Unknown name '{node.id}'. Known constants: pi, e, tau.")

    def _UnaryOp(self, node: ast.UnaryOp, depth: int) -> Any:
        op = _UNARY.get(type(node.op))
        if op is None:
            raise CalculatorError(f"Unsupported operator: {type(node.op).__name__}.")
        return op(self.evaluate(node.operand, depth))

    def _BinOp(self, node: ast.BinOp, depth: int) -> Any:
        if isinstance(node.op, ast.BitXor):  # "2^10" means a power on a calculator
            op: Callable[[Any, Any], Any] | None = _power
        elif isinstance(node.op, ast.Pow):
            op = _power
        else:
            op = _BINARY.get(type(node.op))
        if op is None:
            raise CalculatorError(f"Unsupported operator: {type(node.op).__name__}.")
        left = self.evaluate(node.left, depth)
        right = self.evaluate(node.right, depth)
        if isinstance(node.op, ast.Mult) and isinstance(left, int) and isinstance(right, int):
            if left.bit_length() + right.bit_length() > MAX_INT_BITS + 1:
                raise CalculatorError("The result is too large.")
        try:
            return op(left, right)
        except ZeroDivisionError as exc:
            raise CalculatorError("Division by zero.") from exc
        except OverflowError as exc:
            raise CalculatorError("The result is too large.") from exc

    def _Call(self, node: ast.Call, depth: int) -> Any:
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            name = node.func.id if isinstance(node.func, ast.Name) else "this call"
            known = ", ".join(sorted(_FUNCTIONS))
            raise CalculatorError(f"Unknown function '{name}'. Known functions: {known}.")
        if node.keywords:
            raise CalculatorError("Keyword arguments are not supported.")
        args = [self.evaluate(arg, depth) for arg in node.args]
        name = node.func.id
        if name == "factorial" and (len(args) != 1 or not isinstance(args[0], int)
                                    or not 0 <= args[0] <= _MAX_FACTORIAL):
            raise CalculatorError(f"factorial takes one whole number from 0 to {_MAX_FACTORIAL}.")
        try:
            return _FUNCTIONS[name](*args)
        except (TypeError, ValueError) as exc:
            raise CalculatorError(f"{name}: {exc}.") from exc
        except OverflowError as exc:
            raise CalculatorError("The result is too large.") from exc


def evaluate_expression(expression: str) -> int | float:
    """The value of an arithmetic expression; ``CalculatorError`` explains what is wrong."""
    if not isinstance(expression, str) or not expression.strip():
        raise CalculatorError("The expression is empty.")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"The expression is longer than {MAX_EXPRESSION_CHARS} characters.")
    text = expression.strip().replace("×", "*").replace("÷", "/").replace("−", "-")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise CalculatorError(f"Could not parse the expression: {expression!r}.") from exc
    try:
        return _Evaluator().evaluate(tree)
    except RecursionError as exc:
        raise CalculatorError("The expression is nested too deeply.") from exc


def format_number(value: int | float) -> str:
    if isinstance(value, int):
        return str(value)
    return format(value, ".15g")


class CalculatorTool(Tool):
    name = "calculator"
    description = (
        "Evaluate an arithmetic expression exactly. Supports + - * / // % ** (or ^), parentheses, "
        "sqrt, exp, log, log10, log2, sin, cos, tan, asin, acos, atan, abs, round, min, max, "
        "floor, ceil, factorial and the constants pi, e, tau."
    )
    idempotent = True
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "expression": {"type": "string", "description": "For example: (2 + 3) * 4 ^ 2"},
        },
        "required": ["expression"],
    }

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        expression = arguments.get("expression")
        if not isinstance(expression, str):
            return ToolResult.fail("Missing required argument 'expression' (a string).")
        try:
            return ToolResult.ok(format_number(evaluate_expression(expression)))
        except CalculatorError as exc:
            return ToolResult.fail(str(exc))


def _utc_now() -> datetime:
    return datetime.now(UTC)


def resolve_timezone(name: str | None, default: str = "UTC") -> ZoneInfo | None:
    """The zone for an IANA name, or None when there is no such zone."""
    try:
        return ZoneInfo((name or default).strip())
    except Exception:  # noqa: BLE001 - ZoneInfo raises several kinds for junk names
        return None


class CurrentTimeTool(Tool):
    name = "current_time"
    description = "The current date and time, in a given IANA time zone (default: the agent's)."
    idempotent = True  # a second run reads a later clock, which is what a resumed turn wants
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "timezone": {"type": "string", "description": "An IANA zone, e.g. Europe/Berlin"},
        },
    }

    def __init__(self, *, clock: Callable[[], datetime] = _utc_now,
                 default_timezone: str = "UTC") -> None:
        self._clock = clock
        self._default_timezone = default_timezone

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        requested = arguments.get("timezone")
        if requested is not None and not isinstance(requested, str):
            return ToolResult.fail("The 'timezone' argument must be a string.")
        zone = resolve_timezone(requested, self._default_timezone)
        if zone is None:
            return ToolResult.fail(
                f"Unknown time zone '{requested}'. Use an IANA name such as 'Europe/Berlin' or 'UTC'.")
        now = self._clock()
        if now.tzinfo is None:
            now = now.replace(tzinfo=UTC)
        local = now.astimezone(zone)
        return ToolResult.ok(
            f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()} ({local:%A}), time zone {zone.key}, "
            f"UTC{local:%z}; ISO 8601: {local.isoformat(timespec='seconds')}")


def builtin_tools(*, clock: Callable[[], datetime] = _utc_now,
                  default_timezone: str = "UTC") -> list[Tool]:
    return [CalculatorTool(), CurrentTimeTool(clock=clock, default_timezone=default_timezone)]
