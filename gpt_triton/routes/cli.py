"""``gpt-triton routes MODEL [--spec SPEC]``: every family, its knobs, and how many routes each mode plans."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpt_triton.core.model_info import ModelInfo, inspect_model, parse_shape_hint, resolve_shapes
from gpt_triton.core.spec import TuneSpec, load_spec
from gpt_triton.routes import FAMILIES
from gpt_triton.search import CandidateSearch


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "routes", help="list route families, knobs, defaults and search sizes for a model",
        description="List every route family (available here or why not), its knobs with allowed values and "
        "defaults, and the number of routes each search mode would plan for MODEL and SPEC.",
    )
    parser.add_argument("model", help="the ONNX model")
    parser.add_argument("--spec", help="tuning spec (YAML); default: built-in defaults")
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=1x3x224x224",
                        help="concrete shape for an input with dynamic dims, as for `tune` (repeatable); checked "
                        "against the model and shown with the plan")
    parser.add_argument("--json", action="store_true", help="print the table as JSON instead")
    parser.set_defaults(func=run)


def _value(value: Any) -> str:
    return escape(value if isinstance(value, str) else json.dumps(value))  # "[4, 8]" is not rich markup


def family_table(model: ModelInfo, spec: TuneSpec, counts: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per family: kind, availability, knobs, and routes per search mode (from ``plan_counts``);
    ``knobs_by_version``: for families whose knobs depend on their library's version (TensorRT), the knobs each
    supported version sweeps, known without the library (so a machine without it still shows a GPU node's)."""
    rows: list[dict[str, Any]] = []
    for name, family in FAMILIES.items():
        available, why = family.availability()
        family_spec = spec.families.get(name)
        rows.append({
            "name": name,
            "kind": family.kind,
            "runtime": family.runtime,
            "available": available,
            "reason": why,
            "enabled": family_spec.enabled if family_spec else True,
            "knobs": [k.model_dump() for k in family.knobs(model)],
            "knobs_by_version": {label: [k.model_dump() for k in knobs]
                                 for label, knobs in family.knobs_by_version(model).items()},
            "counts": counts["families"].get(name, {}),
        })
    return rows


def _print_versions(console: Console, row: dict[str, Any]) -> None:
    """What the family would sweep where its library is installed, one version range per block."""
    if not row["knobs_by_version"]:
        return
    console.print(f"  {row['name']} knobs with each supported version (what a machine with it would sweep):",
                  soft_wrap=True, highlight=False, markup=False)
    for label, knobs in row["knobs_by_version"].items():
        console.print(f"    {label}:", soft_wrap=True, highlight=False, markup=False)
        for knob in knobs:
            values = ", ".join(v if isinstance(v, str) else json.dumps(v) for v in knob["values"])
            default = knob["default"] if isinstance(knob["default"], str) else json.dumps(knob["default"])
            console.print(f"      {knob['name']} [{values}] default {default}", soft_wrap=True, highlight=False,
                          markup=False)


def run(args: argparse.Namespace) -> int:
    model = inspect_model(args.model)
    spec = load_spec(args.spec)
    # The same shapes `tune` would run (and the same errors); without --shape, dynamic dims are listed as such.
    hints = dict(parse_shape_hint(text) for text in args.shape)
    shapes = resolve_shapes(model, hints) if hints else None
    # Counted once: the family rows and the per-mode table must show the same plan.
    counts = CandidateSearch(spec, model).plan_counts()
    rows = family_table(model, spec, counts)
    if args.json:
        print(json.dumps({"families": rows, "search": counts, "shapes": shapes}, indent=2))
        return 0
    # Wide enough for the help column when piped (rich would otherwise fold to 80 columns).
    console = Console(width=None if sys.stdout.isatty() else 180)
    table = Table(title=f"Route families for {model.name}")
    for column in ("family", "kind", "available", "knob", "values", "default", "routes", "help"):
        table.add_column(column, overflow="fold")
    for row in rows:
        status = "yes" if row["available"] else "no (see below)"
        if not row["enabled"]:
            status += " (disabled by spec)"
        routes = ", ".join(f"{k} {v}" for k, v in row["counts"].items()) or "-"
        knobs = row["knobs"] or [{"name": "-", "values": [], "default": "-", "help": ""}]
        for i, knob in enumerate(knobs):
            first = i == 0
            table.add_row(
                row["name"] if first else "", row["kind"] if first else "", status if first else "",
                knob["name"], ", ".join(_value(v) for v in knob["values"]), _value(knob["default"]),
                routes if first else "", escape(knob["help"]),
            )
    console.print(table)
    for row in rows:  # reasons as plain lines: a table cell would fold them
        if not row["available"]:
            console.print(f"{row['name']} is unavailable here: {row['reason']}", soft_wrap=True, highlight=False, markup=False)
            _print_versions(console, row)
    modes = Table(title=f"Routes per search mode (max_builds={counts['max_builds']})")
    modes.add_column("mode")
    modes.add_column("routes planned")
    modes.add_column("note")
    notes = {
        "fast": "baseline + each family's start + one knob at a time",
        "full": "cartesian product per family (capped at max_builds)",
        "mixed": "the fast set, then the product of winning values after feedback",
        "random": "seeded random routes + baseline",
    }
    for mode, count in counts["modes"].items():
        capped = min(count, counts["max_builds"])
        shown = f"{capped}" + (f" of {count}" if capped < count else "")
        modes.add_row(mode, shown + (" (+ refinement)" if mode == "mixed" else ""), notes[mode])
    console.print(modes)
    if shapes is not None:
        console.print("request shapes: " + ", ".join(f"{name}={'x'.join(map(str, dims))}" for name, dims in shapes.items()),
                      soft_wrap=True, highlight=False, markup=False)
    return 0
