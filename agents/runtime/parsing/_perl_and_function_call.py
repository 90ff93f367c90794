"""Two block styles some models emit: Perl-like ``TOOL_CALL {tool => "x", args => {--k "v"}}}``
and ``<FunctionCall>name<code>key>value</code></FunctionCall>``."""

from __future__ import annotations

import re

from ._calls import _Parsed, map_tool_name_alias
from ._text import _regex_seeker, _rust_lines, _trim

_PERL_OPEN = re.compile(r"(?:\[TOOL_CALL\]|TOOL_CALL)\s*\{")
_PERL_CLOSE = re.compile(r"\}\}\s*(?:\[/TOOL_CALL\]|/TOOL_CALL)")
_PERL_TOOL_NAME = re.compile(r'tool\s*=>\s*"([^"]++)"')
_PERL_ARGS_BLOCK = re.compile(r"(?s)args\s*=>\s*\{(.+?)(?:\}|\Z)")
_PERL_ARG = re.compile(r'--(\w+)\s+"([^"]++)"')


def _parse_perl_style_tool_calls(text: str) -> list[_Parsed]:
    calls = []
    close_seek, _found = _regex_seeker(text, _PERL_CLOSE)
    pos = 0
    while True:
        m = _PERL_OPEN.search(text, pos)
        if m is None:
            return calls
        close = close_seek(m.end() + 1)
        if close < 0:
            return calls
        content = text[m.end():close]
        end = _PERL_CLOSE.match(text, close)
        pos = end.end() if end is not None else close + 1
        name = _PERL_TOOL_NAME.search(content)
        if name is None:
            continue
        block = _PERL_ARGS_BLOCK.search(content)
        args_block = block.group(1) if block is not None else ""
        arguments = {k: v for k, v in _PERL_ARG.findall(args_block)}
        if arguments:
            calls.append(_Parsed(map_tool_name_alias(name.group(1)), arguments))


_FUNCTION_CALL = re.compile(r"(?s)<FunctionCall>\s*(\w+)\s*<code>([^<]+)</code>\s*</FunctionCall>")


def _parse_function_call_tool_calls(text: str) -> list[_Parsed]:
    calls = []
    for m in _FUNCTION_CALL.finditer(text):
        arguments = {}
        for raw_line in _rust_lines(m.group(2)):
            line = _trim(raw_line)
            gt = line.find(">")
            if gt >= 0:
                key = _trim(line[:gt])
                value = _trim(line[gt + 1:])
                if key and value:
                    arguments[key] = value
        if arguments:
            calls.append(_Parsed(map_tool_name_alias(m.group(1)), arguments))
    return calls
