from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agents.runtime.builtin import (
    CalculatorTool,
    CurrentTimeTool,
    builtin_tools,
    evaluate_expression,
)


@pytest.mark.parametrize(("expression", "expected"), [
    ("1 + 2 * 3", "7"),
    ("(1 + 2) * 3", "9"),
    ("2 ^ 10", "1024"),
    ("2 ** 0.5 * 2 ** 0.5", "2"),
    ("7 / 2", "3.5"),
    ("7 // 2", "3"),
    ("-7 % 3", "2"),
    ("0.1 + 0.2", "0.3"),
    ("sqrt(16) + abs(-2)", "6"),
    ("max(1, 5, 3)", "5"),
    ("round(pi, 4)", "3.1416"),
    ("3 × 4 ÷ 2", "6"),
    ("factorial(5)", "120"),
    ("+".join(["1"] * 240), "240"),
])
async def test_calculator_evaluates_arithmetic(expression, expected):
    result = await CalculatorTool().execute({"expression": expression})
    assert result.success, result.error
    assert result.output == expected


@pytest.mark.parametrize(("expression", "error"), [
    ("1 / 0", "Division by zero."),
    ("2 ** 100000", "Exponents are limited"),
    ("9 ** 9999", "too large"),
    ("10.0 ** 400", "too large"),
    ("(10 ** 1000) * (10 ** 1000)", "too large"),
    ("factorial(100000)", "factorial takes one whole number"),
    ("__import__('os').system('true')", "Unknown function"),
    ("().__class__", "Unsupported syntax"),
    ("x + 1", "Unknown name 'x'"),
    ("'a' * 3", "Unsupported value"),
    ("1 +", "Could not parse"),
    ("(-8) ** 0.5", "not a real number"),
    ("True + 1", "Unsupported value"),
    ("1 << 3", "Unsupported operator"),
    ("", "empty"),
    ("1+" * 300 + "1", "longer than 500"),
    ("sqrt(-1)", "sqrt"),
    ("(" * 240 + "1" + ")" * 240, "Could not parse"),
])
async def test_calculator_refuses_with_a_clear_error(expression, error):
    result = await CalculatorTool().execute({"expression": expression})
    assert not result.success
    assert error in result.error


async def test_calculator_requires_an_expression():
    result = await CalculatorTool().execute({})
    assert not result.success and "expression" in result.error


def test_evaluate_expression_never_uses_eval(monkeypatch):
    import builtins

    def forbidden(*args, **kwargs):
        raise AssertionError("eval was called")

    monkeypatch.setattr(builtins, "eval", forbidden)
    assert evaluate_expression("6 * 7") == 42


def clock() -> datetime:
    return datetime(2026, 3, 22, 6, 30, 5, tzinfo=UTC)


async def test_current_time_uses_the_injected_clock_and_zone():
    result = await CurrentTimeTool(clock=clock).execute({"timezone": "Asia/Seoul"})
    assert result.success
    assert result.output.startswith("2026-03-22 15:30:05 KST (Sunday), time zone Asia/Seoul, UTC+0900")
    assert "2026-03-22T15:30:05+09:00" in result.output


async def test_current_time_defaults_to_the_configured_zone():
    tool = CurrentTimeTool(clock=clock, default_timezone="Europe/Berlin")
    result = await tool.execute({})
    assert result.output.startswith("2026-03-22 07:30:05 CET")


async def test_current_time_treats_a_naive_clock_as_utc():
    result = await CurrentTimeTool(clock=lambda: datetime(2026, 1, 1, 12, 0)).execute({})
    assert result.output.startswith("2026-01-01 12:00:00 UTC")


@pytest.mark.parametrize("zone", ["Mars/Olympus", "../../etc/passwd", "Europe/", 42])
async def test_current_time_rejects_unknown_zones(zone):
    result = await CurrentTimeTool(clock=clock).execute({"timezone": zone})
    assert not result.success
    assert "time zone" in result.error or "timezone" in result.error


def test_builtin_tools_have_specs():
    tools = builtin_tools(clock=clock)
    specs = {t.name: t.spec() for t in tools}
    assert set(specs) == {"calculator", "current_time"}
    assert specs["calculator"].parameters["required"] == ["expression"]
    assert not any(t.requires_approval for t in tools)
