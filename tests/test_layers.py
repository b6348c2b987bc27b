"""The layer picture in ARCHITECTURE.md is the rule: every import between gpt_triton modules (inside
functions too) goes from a unit to itself or to a unit its row lists, and no two modules import each
other, directly or around a loop. The table is read from ARCHITECTURE.md, so the picture cannot drift
from the code without this test failing."""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gpt_triton"


def layer_table() -> list[tuple[str, list[str], set[str]]]:
    """(unit, module patterns, units it may import), top to bottom, from ARCHITECTURE.md's layer table."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    block = text.split("<!-- layers -->", 1)[1].split("<!-- /layers -->", 1)[0]
    rows = []
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("unit", "---") or set(cells[0]) <= {"-"}:
            continue
        patterns = re.findall(r"`([^`]+)`", cells[1])
        allowed = set(re.findall(r"\b[a-z][a-z0-9_]*\b", cells[2])) - {"nothing", "of", "gpt_triton", "anything", "below"}
        rows.append((cells[0], patterns, allowed))
    assert rows, "ARCHITECTURE.md lost its <!-- layers --> table"
    return rows


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """gpt_triton modules ``name`` imports anywhere in its body (a package import counts as its __init__)."""
    found: set[str] = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [module] + [f"{module}.{alias.name}" for alias in node.names]
        for target in targets:
            if target in known and target != name:
                found.add(target)
    return found


def unit_of(module: str, table: list[tuple[str, list[str], set[str]]]) -> str:
    for unit, patterns, _ in table:
        if any(module == p or fnmatch.fnmatchcase(module, p) for p in patterns):
            return unit
    raise AssertionError(f"{module} is in no row of ARCHITECTURE.md's layer table: add it where it belongs")


def test_every_import_follows_the_layer_table() -> None:
    table = layer_table()
    allowed = {unit: may for unit, _, may in table}
    known = modules()
    wrong = []
    for name, path in sorted(known.items()):
        source = unit_of(name, table)
        for target in sorted(imports(name, path, known)):
            goal = unit_of(target, table)
            if goal != source and goal not in allowed[source]:
                wrong.append(f"{name} ({source}) imports {target} ({goal})")
    assert not wrong, "imports against ARCHITECTURE.md's layer table:\n" + "\n".join(wrong)


def test_the_table_lists_only_units_it_defines_and_is_a_stack() -> None:
    """Each unit may import only units defined below it, so the picture is acyclic by construction."""
    table = layer_table()
    below: set[str] = set()
    for unit, _, may in reversed(table):
        assert may <= below, f"{unit} may import {sorted(may - below)}, which are not below it in the table"
        below.add(unit)


def test_no_import_cycle_between_modules() -> None:
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def strong(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                strong(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            strong(node)

    def face(component: list[str]) -> bool:
        """A package and its own submodules importing each other through its __init__ re-exports."""
        packages = [m for m in component if known[m].name == "__init__.py"]
        return len(packages) == 1 and all(m == packages[0] or m.startswith(packages[0] + ".") for m in component)

    cycles = [c for c in components if not face(c)]
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_runtime_modules_import_nothing_of_gpt_triton_so_the_adapter_can_ship_them() -> None:
    for path in (PACKAGE / "runtimes").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and not node.level:
                assert not (node.module or "").startswith("gpt_triton"), f"{path.name} imports {node.module}"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("gpt_triton") for a in node.names), path.name
