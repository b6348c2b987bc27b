"""Layer groups: an ONNX graph's nodes cut into a few named groups a precision route keeps at fp32 or lowers.

Pure functions of the graph, so the sensitivity search (which names the groups a mixed-precision route keeps)
and the family builds (which turn ``fp32_groups`` back into node names) always agree on what a group holds.

* Where node names carry blocks (``/stage2/fc1/MatMul``, ``layer3.1.conv2``, ``encoder/block_4/...``), a group
  is a name prefix: the shallowest prefix depth that splits the graph into at least two groups (and at most
  ``max_groups``) wins, so groups follow the model's own stages.
* Otherwise (unnamed or flat names), the topological order is cut into ``max_groups`` contiguous chunks of
  comparable cost, the cost of a node being the size of its constant inputs (weights), a proxy for its
  arithmetic that needs no shape inference.

Unnamed nodes get the names :func:`name_unnamed_nodes` gives (``<OpType>_<index>``), the same scheme as the
fp16 conversion, so block lists and exclusion lists built from groups name real nodes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpt_triton.core.errors import GptTritonError

_SEPARATORS = re.compile(r"[/.:]")
MAX_PREFIX_DEPTH = 3
# One grouping for every caller: the search names groups and the build resolves the names with the same cut.
MAX_GROUPS = 8


@dataclass(frozen=True)
class LayerGroup:
    """A named set of nodes, in topological order, and its share of the graph's weight elements."""

    name: str
    nodes: tuple[str, ...]
    cost: float


def name_unnamed_nodes(model: Any) -> int:
    """Give every unnamed node of ``model`` (an onnx ModelProto, changed in place) the name
    ``<OpType>_<index>`` (suffixed with ``_`` until unique); returns how many were named."""
    used = {node.name for node in model.graph.node if node.name}
    named = 0
    for index, node in enumerate(model.graph.node):
        if not node.name:
            name = f"{node.op_type}_{index}"
            while name in used:
                name += "_"
            node.name = name
            used.add(name)
            named += 1
    return named


def _tokens(name: str) -> list[str]:
    return [t for t in _SEPARATORS.split(name) if t]


def _node_costs(model: Any) -> list[float]:
    sizes: dict[str, float] = {}
    for init in model.graph.initializer:
        count = 1
        for dim in init.dims:
            count *= int(dim)
        sizes[init.name] = float(count)
    # A node without weights still costs something, so a chunk of element-wise ops is never free.
    return [1.0 + sum(sizes.get(name, 0.0) for name in node.input) for node in model.graph.node]


def _by_prefix(names: Sequence[str], costs: Sequence[float], max_groups: int) -> list[LayerGroup] | None:
    for depth in range(1, MAX_PREFIX_DEPTH + 1):
        order: list[str] = []
        members: dict[str, list[int]] = {}
        current: str | None = None
        for index, name in enumerate(names):
            tokens = _tokens(name)
            # The last token is the op itself: a name needs depth + 1 tokens to carry a depth-deep block.
            prefix = "/".join(tokens[:depth]) if len(tokens) > depth else current
            if prefix is None:
                prefix = "/".join(tokens[:depth]) or name  # a leading flat node opens its own group
            if prefix not in members:
                members[prefix] = []
                order.append(prefix)
            members[prefix].append(index)
            current = prefix
        if 2 <= len(order) <= max_groups:
            return [
                LayerGroup(name=p, nodes=tuple(names[i] for i in members[p]), cost=sum(costs[i] for i in members[p]))
                for p in order
            ]
        if len(order) > max_groups:
            return None  # deeper prefixes only split further
    return None


def _by_cost(names: Sequence[str], costs: Sequence[float], max_groups: int) -> list[LayerGroup]:
    count = min(max_groups, len(names))
    total = sum(costs)
    groups: list[LayerGroup] = []
    start = 0
    spent = 0.0
    for chunk in range(count):
        target = total * (chunk + 1) / count
        end = start
        # Take nodes until the chunk reaches its share, leaving at least one node for each later chunk.
        while end < len(names) - (count - chunk - 1) and (end == start or spent + costs[end] <= target + 1e-9):
            spent += costs[end]
            end += 1
        if chunk == count - 1:
            spent += sum(costs[end:])
            end = len(names)
        groups.append(LayerGroup(name=f"chunk{chunk}", nodes=tuple(names[start:end]),
                                 cost=sum(costs[start:end])))
        start = end
    return [g for g in groups if g.nodes]


def layer_groups(model: Any, max_groups: int = MAX_GROUPS) -> list[LayerGroup]:
    """The groups of ``model`` (an onnx ModelProto; unnamed nodes are named in place), in topological order."""
    if max_groups < 1:
        raise GptTritonError(f"max_groups is {max_groups}; use at least 1")
    name_unnamed_nodes(model)
    names = [node.name for node in model.graph.node]
    if not names:
        raise GptTritonError("the model has no nodes to group")
    costs = _node_costs(model)
    return _by_prefix(names, costs, max_groups) or _by_cost(names, costs, max_groups)


def load_groups(path: str | Path, max_groups: int = MAX_GROUPS) -> list[LayerGroup]:
    import onnx

    return layer_groups(onnx.load(str(path), load_external_data=False), max_groups)


def group_nodes(groups: Sequence[LayerGroup], wanted: Sequence[str]) -> list[str]:
    """The node names of the groups named in ``wanted``; an unknown group name is bad input."""
    by_name = {g.name: g for g in groups}
    unknown = [w for w in wanted if w not in by_name]
    if unknown:
        raise GptTritonError(
            f"fp32_groups names unknown layer group(s) {unknown}; this model's groups are: {', '.join(by_name)}"
        )
    return [node for w in wanted for node in by_name[w].nodes]
