"""The package's shape: the names importers took from the single module it replaced still
resolve, and its modules import only downwards (the parser imports the dialects, the dialects
import the shared helpers, never the other way)."""

from __future__ import annotations

import ast
import pathlib

import pytest

from agents.runtime import parsing

PUBLIC = ["ToolCall", "build_native_assistant_history",
          "build_native_assistant_history_from_parsed_calls", "default_param_for_tool",
          "detect_tool_call_parse_issue", "extract_json_values", "map_tool_name_alias",
          "parse_arguments_value", "parse_glm_shortened_body", "parse_glm_style_tool_calls",
          "parse_tool_call_value", "parse_tool_calls", "parse_tool_calls_from_json_value",
          "resolve_display_text", "strip_think_tags"]
# Reached on the old module by sanitize, by tests, or public there without being in __all__.
ALSO_REACHED = ["JSON_WS", "MAX_JSON_DEPTH", "MISSING", "PARSE_ISSUE", "RUST_WS", "json_loads",
                "_ascii_lower", "_JsonScanner", "_literal_seeker", "_rust_lines", "_trim",
                "_DECODER", "_serde_accepts", "_named_blocks_ci", "_ParseState", "_regex_seeker",
                "_MD_TOOL_CALL_CLOSE", "_MD_TOOL_CALL_OPEN", "_fence_matches",
                "_parse_perl_style_tool_calls", "_parse_raw"]

# Lower layers first; a module may import only from layers before its own.
LAYERS = [
    {"_text"},
    {"_json_values"},
    {"_calls", "_think"},
    {"_xml_bodies", "_glm", "_minimax", "_perl_and_function_call", "_file_write_recovery",
     "_loop_helpers"},
    {"_tag_loop", "_fences"},
    {"_parser"},
]
PACKAGE = pathlib.Path(parsing.__file__).parent


def test_the_public_names_are_unchanged():
    assert sorted(parsing.__all__) == sorted(PUBLIC)
    for name in PUBLIC + ALSO_REACHED:
        assert hasattr(parsing, name), name


def test_every_module_has_a_layer():
    modules = {p.stem for p in PACKAGE.glob("_*.py")} - {"__init__"}
    assert modules == set().union(*LAYERS)


@pytest.mark.parametrize("layer", range(len(LAYERS)))
def test_modules_import_only_lower_layers(layer):
    allowed = set().union(*LAYERS[:layer])
    for module in LAYERS[layer]:
        tree = ast.parse((PACKAGE / f"{module}.py").read_text())
        imported = {node.module for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.level == 1}
        assert imported <= allowed, (module, imported - allowed)
        # Imports inside functions would hide a cycle from this check.
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert not [n for n in ast.walk(node) if isinstance(n, ast.Import | ast.ImportFrom)]
