"""Checks of a parsed YAML document's nodes before any value is built (wseplan.catalog.load.read_yaml): nesting, integer
and float literals, alias expansion, and keys given twice; every problem is a one-line CatalogError naming the line
and the field."""
from __future__ import annotations

import math
from pathlib import Path

from ..errors import CatalogError

MAX_NESTING = 64
"""Deepest nesting of mappings and lists in a YAML or JSON input (the catalogs nest 5 deep)."""
MAX_INT_DIGITS = 4300
"""Longest integer literal [digits]: Python's own limit for converting text to int."""
MAX_EXPANDED_VALUES = 1_000_000
"""Most values a YAML document may expand to through aliases (anchors reused over and over)."""


def label(path: list) -> str:
    out = ""
    for k in path:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    if len(out) > 120:
        out = out[:40] + "..." + out[-60:]
    return out or "(top level)"


def _key_value(node):
    """A mapping key as the dict will hold it (1, 1.0 and true are one key; "1" another)."""
    tag, text = node.tag.rsplit(":", 1)[-1], node.value.replace("_", "").lower()
    try:
        if tag == "int":
            return ("n", float(int(text, 0)))
        if tag == "float":
            return ("n", float(text))
    except ValueError:
        return (tag, node.value)
    if tag == "bool":
        return ("n", 1.0 if text in ("true", "yes", "on", "y") else 0.0)
    return (tag, node.value)


def check_yaml_nodes(root, path: Path) -> None:
    """Refuse, naming the field and line: nesting deeper than MAX_NESTING, integers longer than MAX_INT_DIGITS,
    non-finite floats (.inf, .nan, 1.0e+999) and alias expansion beyond MAX_EXPANDED_VALUES."""
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode

    def fail(node, where: list, msg: str):
        line = node.start_mark.line + 1 if getattr(node, "start_mark", None) is not None else 0
        raise CatalogError(f"{path}: line {line}: {label(where)}: {msg}")

    size: dict[int, int] = {}  # node id -> values it expands to (aliases share nodes)
    stack = [(root, [], 0, False)]
    while stack:
        node, where, depth, done = stack.pop()
        nid = id(node)
        if done:
            kids = node.value if isinstance(node, SequenceNode) else [v for kv in node.value for v in kv]
            size[nid] = 1 + sum(size.get(id(k), 1) for k in kids)
            if size[nid] > MAX_EXPANDED_VALUES:
                fail(node, where, f"expands to more than {MAX_EXPANDED_VALUES:,} values through aliases; "
                                  "write the values out")
            continue
        if nid in size:
            continue
        if depth > MAX_NESTING:
            fail(node, where, f"nested deeper than {MAX_NESTING} levels; flatten the file")
        if isinstance(node, ScalarNode):
            size[nid] = 1
            if node.tag == "tag:yaml.org,2002:int":
                digits = sum(c.isalnum() for c in node.value)
                if digits > MAX_INT_DIGITS:
                    fail(node, where, f"an integer of {digits:,} digits; numbers have at most {MAX_INT_DIGITS:,}")
            elif node.tag == "tag:yaml.org,2002:float":
                text = node.value.replace("_", "").lower()
                if "inf" in text or "nan" in text:
                    fail(node, where, f"{node.value!r} is not a finite number; give a finite value")
                try:
                    finite = math.isfinite(float(text)) if ":" not in text else True
                except ValueError:
                    finite = True
                if not finite:
                    fail(node, where, f"{node.value!r} overflows a float (above 1.8e308); give a smaller value")
            continue
        stack.append((node, where, depth, True))
        if isinstance(node, SequenceNode):
            for i, child in enumerate(node.value):
                stack.append((child, [*where, i], depth + 1, False))
        elif isinstance(node, MappingNode):
            seen: dict = {}  # a key given twice: PyYAML keeps the last silently (audit30a M3; as its value: 1 and 1.0)
            for knode, vnode in node.value:
                key = knode.value if isinstance(knode, ScalarNode) else "?"
                k = _key_value(knode) if isinstance(knode, ScalarNode) and key != "<<" else None
                if k is not None and seen.setdefault(k, knode) is not knode:
                    fail(knode, [*where, key], f"given twice (also line {seen[k].start_mark.line + 1}); keep one")
                if isinstance(key, str) and len(key) > 80:
                    key = key[:77] + "..."
                stack.append((knode, [*where, key], depth + 1, False))
                stack.append((vnode, [*where, key], depth + 1, False))
