"""The import rules of docs/architecture.md, checked on the source (``make lint`` runs this).

Every import counts: at module level, inside functions, under ``TYPE_CHECKING``, and
``importlib.import_module("...")`` or ``plugins.lazy_exports(__name__, {...})`` with literal module
names. ``importlib.import_module`` with a computed name is allowed only in ``gpuwarden.plugins``
(the one loader, for URLs and entry points a user names).

Rules:
1. A module imports only from its own package or from packages in lower layers (``LAYERS``);
   a package's command-line modules (``cli.py``, ``*_cli.py``, ``COMMANDS``) sit in the top
   layer.
2. No package imports another package's private module (a ``_name`` below the package).
3. No import cycles between modules.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Lowest first. A name is a top-level package or module of ``gpuwarden``.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(names.split())
    for names in (
        "errors",
        "telemetry config plugins lifecycle httpguard outbound tuning wording",
        "health counters readings",
        "xid signals",
        "sim",
        "collectors",
        "store",
        "ingest collect summary",
        "models",
        "alerts scheduler exporter",
        "planning",
        "scheduler_hooks",
        "serve",
        "closedloop dashboard reports",
        "demo cliutil cli __main__",
    )
)
TOP = len(LAYERS) - 1
#: Private helpers of a top-level module: part of that module's package.
OWNERS = {
    "_ingest_read": "ingest",
    "_ingest_cells": "ingest",
    "_ingest_report": "ingest",
    "_exporter_render": "exporter",
}

#: Modules run as commands (``python -m``), in the top layer like ``cli.py``: the screenshot
#: tool simulates a demo store through ``gpuwarden.demo``.
COMMANDS = frozenset({"gpuwarden.dashboard.screenshots"})
#: Imports the rules forbid that the code still makes, each with the issue that removes it.
KNOWN: frozenset[tuple[str, str]] = frozenset()


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / "gpuwarden").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _literal_str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def imports(module: str, path: Path, mods: dict[str, Path]) -> tuple[set[str], list[str]]:
    """Modules of gpuwarden that ``module`` imports, and problems found reading them."""
    tree = ast.parse(path.read_text(), str(path))
    names: list[str] = []
    problems: list[str] = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                names.append(full if full in mods else base)
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called == "import_module" and node.args:
                literal = _literal_str(node.args[0])
                if literal is not None:
                    names.append(literal)
                elif module != "gpuwarden.plugins":
                    problems.append(f"{module}: import_module with a computed name")
            elif called == "lazy_exports" and len(node.args) > 1:
                table = node.args[1]
                if isinstance(table, ast.Dict):
                    names += [v for v in map(_literal_str, table.values) if v]
    found = set()
    for name in names:
        if name.startswith("gpuwarden"):
            target = _resolve(name, mods)
            if target and target != module:
                found.add(target)
    return found, problems


def layer(module: str) -> int:
    leaf = module.rpartition(".")[2]
    if leaf == "cli" or leaf.endswith("_cli") or module in COMMANDS:
        return TOP
    top = _package(module) if "." in module else "__init__"
    if top == "__init__":
        return 0  # the root package: a version string
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise KeyError(f"{module}: its package {top!r} is in no layer of LAYERS")


def _package(module: str) -> str:
    top = module.split(".")[1] if "." in module else module
    return OWNERS.get(top, top)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def violations() -> list[str]:
    """Every broken rule, one line each (empty: the architecture holds)."""
    mods = modules()
    edges: dict[str, set[str]] = defaultdict(set)
    out: list[str] = []
    for module, path in mods.items():
        found, problems = imports(module, path, mods)
        edges[module] |= found
        out += problems
    for module, targets in sorted(edges.items()):
        for target in sorted(targets):
            if (module, target) in KNOWN:
                continue
            own = _package(module) == _package(target)
            if not own and layer(target) > layer(module):
                out.append(f"layer: {module} imports {target}, a higher layer")
            elif not own and layer(target) == layer(module) and layer(module) != TOP:
                out.append(f"layer: {module} imports {target}, another package of its layer")
            private = any(p.startswith("_") for p in target.split(".")[1:])
            if not own and private:
                out.append(f"private: {module} imports {target}")
    out += [f"cycle: {' <-> '.join(c)}" for c in _cycles(edges)]
    return out


def main() -> int:
    found = violations()
    for line in found:
        print(line)
    print(f"architecture: {len(found)} violation(s)" if found else "architecture: ok")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
