"""YAML for scenario files and `--set` values, read as untrusted input.

PyYAML's SafeLoader builds no objects, but it still recurses once per nesting level, builds every
node of a document before anything checks it, expands aliases on use (a "billion laughs" document
is a few lines), converts integers of any length and reads `1e12` as text (YAML 1.1 wants a dot).
ScenarioLoader bounds depth, node count, alias expansion and integer digits (emulator/limits.py),
refuses duplicate keys, reads exponent floats as numbers, and takes only true/false as booleans
(YAML 1.2: `affinity: off` is the word off, not False). Every problem is a YAMLError with the
position, which the callers turn into one ScenarioError line.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from emulator.limits import MAX_INT_DIGITS, MAX_NESTING, MAX_YAML_NODES

FLOAT_TAG = "tag:yaml.org,2002:float"
BOOL_TAG = "tag:yaml.org,2002:bool"
# YAML 1.2's booleans. YAML 1.1 also reads yes/no/on/off as booleans, so a scenario's documented
# `router.affinity: off` (or `--set router.affinity=off`) would arrive as False.
BOOL_PATTERN = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
# YAML 1.1's float pattern, with the fraction's dot optional before an exponent (1e12, 2E-3), as
# YAML 1.2 and JSON read them.
FLOAT_PATTERN = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


class LimitError(yaml.MarkedYAMLError):
    """A document beyond a bound: too deep, too many nodes, an integer too long."""


class ScenarioLoader(yaml.SafeLoader):
    """SafeLoader with the bounds above; one instance reads one document."""

    yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag not in (FLOAT_TAG, BOOL_TAG)]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._composed = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        """Count depth and nodes while composing, so a deep or huge document stops early."""
        self._depth += 1
        self._composed += 1
        try:
            if self._depth > MAX_NESTING:
                self._limit(f"nested deeper than {MAX_NESTING} levels; flatten the value")
            if self._composed > MAX_YAML_NODES:
                self._limit(f"more than {MAX_YAML_NODES:,} values; shorten the document")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None:
            _check_expansion(node)
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        """Refuse a key given twice in one mapping (plain YAML keeps the last)."""
        seen: set[str] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                if key_node.value in seen:
                    problem = f"duplicate key {key_node.value!r}; keep one"
                    raise ConstructorError(None, None, problem, key_node.start_mark)
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        digits = node.value.lstrip("+-").replace("_", "")
        if len(digits) > MAX_INT_DIGITS:
            raise LimitError(None, None, f"an integer of more than {MAX_INT_DIGITS} digits; "
                             "use a smaller number", node.start_mark)
        return super().construct_yaml_int(node)

    def _limit(self, problem: str) -> None:
        raise LimitError(None, None, problem, self.peek_event().start_mark)


ScenarioLoader.add_implicit_resolver(FLOAT_TAG, FLOAT_PATTERN, list("-+0123456789."))
ScenarioLoader.add_implicit_resolver(BOOL_TAG, BOOL_PATTERN, list("tTfF"))
ScenarioLoader.add_constructor("tag:yaml.org,2002:int", ScenarioLoader.construct_yaml_int)


def _check_expansion(root: yaml.Node) -> None:
    """The document as the constructor will expand it: aliases count once per use, a cycle (an
    alias inside its own anchor) is refused. Sizes are memoised per node, so this is linear in the
    composed nodes even when the expansion is exponential."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, expanded depth)
    open_nodes: set[int] = set()

    def visit(node: yaml.Node) -> tuple[int, int]:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise LimitError(None, None, "an alias inside its own anchor; write the value out",
                             node.start_mark)
        open_nodes.add(key)
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        count, depth = 1, 1
        for child in children:
            child_count, child_depth = visit(child)
            count, depth = count + child_count, max(depth, child_depth + 1)
            if count > MAX_YAML_NODES or depth > MAX_NESTING:
                raise LimitError(None, None, f"aliases expand it past {MAX_YAML_NODES:,} values or "
                                 f"{MAX_NESTING} levels; write less", node.start_mark)
        open_nodes.discard(key)
        sizes[key] = (count, depth)
        return count, depth

    visit(root)


def load_yaml(text: str) -> Any:
    """One YAML document, bounded as above; raises yaml.YAMLError (MarkedYAMLError with a line)."""
    loader = ScenarioLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def describe_yaml_error(err: yaml.YAMLError) -> tuple[int | None, str]:
    """(1-based line or None, the problem on one line) of a YAMLError."""
    if isinstance(err, yaml.MarkedYAMLError):
        mark = err.problem_mark or err.context_mark
        what = " ".join(p for p in (err.context, err.problem) if p)
        return (mark.line + 1 if mark else None), " ".join(what.split())
    return None, " ".join(str(err).split())
