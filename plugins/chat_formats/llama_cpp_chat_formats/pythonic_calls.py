"""LFM2's tool calls: Python call expressions, ``<|tool_call_start|>[NAME(K=V, ...), ...]<|tool_call_end|>``.

The list is parsed as a Python expression and each argument read with :func:`ast.literal_eval`: literals only
(strings, numbers, lists, dicts, True/False/None), nothing is evaluated.
"""

from __future__ import annotations

import ast
from typing import Any

from .call_values import OfferedTools, ToolCallStyle, make_tool_call

OPENER, CLOSER = "<|tool_call_start|>", "<|tool_call_end|>"


def parse_pythonic(text: str, offered: OfferedTools) -> tuple[str, list[dict[str, Any]]] | None:
    at = text.find(OPENER)
    if at < 0:
        return None
    body = text[at + len(OPENER):]
    end = body.find(CLOSER)
    body = (body[:end] if end >= 0 else body).strip()
    try:
        tree = ast.parse(body, mode="eval").body
        calls_made = tree.elts if isinstance(tree, ast.List) else [tree]
        calls = []
        for node in calls_made:
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in offered
                    and not node.args and all(k.arg is not None for k in node.keywords)):
                continue
            calls.append(make_tool_call(node.func.id, {k.arg: ast.literal_eval(k.value) for k in node.keywords}))
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):  # not a call list, or not literals
        return None
    return (text[:at].strip(), calls) if calls else None


STYLE = ToolCallStyle("lfm2", parse_pythonic, (OPENER,), (OPENER, CLOSER))

__all__ = ["CLOSER", "OPENER", "STYLE", "parse_pythonic"]
