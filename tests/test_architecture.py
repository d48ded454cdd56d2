"""The architecture holds: import layers, no private imports across packages, no cycles; the
health vocabulary (states, the at-risk threshold) is written in one place."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "check_architecture", ROOT / "tests" / "check_architecture.py"
)
arch = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
sys.modules["check_architecture"] = arch
_spec.loader.exec_module(arch)  # type: ignore[union-attr]


def test_the_import_rules_hold():
    assert arch.violations() == []


def test_the_checker_sees_imports_inside_functions_and_importlib(tmp_path):
    mods = arch.modules()
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import importlib\n"
        "def f():\n"
        "    from gpuwarden.serve import service\n"
        "    importlib.import_module('gpuwarden.dashboard.data')\n"
        "    importlib.import_module(name)\n"
        "    from gpuwarden.store import _verdicts\n"
    )
    found, problems = arch.imports("gpuwarden.health", bad, mods)
    assert {
        "gpuwarden.serve.service",
        "gpuwarden.dashboard.data",
        "gpuwarden.store._verdicts",
    } <= found
    assert problems == ["gpuwarden.health: import_module with a computed name"]
    assert arch.layer("gpuwarden.health") < arch.layer("gpuwarden.serve.service")
    assert arch.layer("gpuwarden.models.cli") == arch.TOP


def test_the_checker_finds_cycles():
    assert arch._cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _literals(path: Path) -> list[tuple[int, object]]:
    tree = ast.parse(path.read_text())
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and id(n) not in docstrings
    ]


def test_the_threshold_and_the_states_are_written_once():
    """0.7 as a threshold and the state names live in gpuwarden/health.py only (the simulator
    draws its own probabilities, which are not thresholds)."""
    states = {"at-risk", "unhealthy", "at_risk"}
    # /healthz answers "unhealthy" for the service itself, not for a GPU; the trade-off plot
    # sweeps thresholds from 0.2 to 0.95
    other_meaning = {
        ("gpuwarden/serve/api.py", "unhealthy"),
        ("gpuwarden/scheduler/api.py", "unhealthy"),
        ("gpuwarden/models/evaluate.py", 0.7),
        ("gpuwarden/models/memory_errors.py", 0.7),  # the 70/30 time split of the HBM log
        ("gpuwarden/scheduler/power.py", 0.7),  # the inference power cap, 70% of the maximum
        ("gpuwarden/planning/tco.py", 0.7),  # 70% yearly utilisation, the guideline's TCO figure
    }
    found = []
    for path in sorted((ROOT / "gpuwarden").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "gpuwarden/health.py":
            continue
        for line, value in _literals(path):
            if (rel, value) in other_meaning:
                continue
            if value in states:
                found.append(f"{rel}:{line} {value!r}")
            if value == 0.7 and not rel.startswith("gpuwarden/sim/"):
                found.append(f"{rel}:{line} 0.7")
    assert found == []
    rules = (ROOT / "gpuwarden" / "alerts" / "rules" / "gpuwarden.rules.yml").read_text()
    assert "0.7" not in rules and 'gpuwarden_gpu_state{state="at-risk"} == 1' in rules


def test_the_old_xid_module_still_imports_with_a_deprecation_note():
    import importlib
    import warnings

    sys.modules.pop("gpuwarden.xid", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        xid = importlib.import_module("gpuwarden.xid")
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    assert xid.describe(79).fatal and 48 in xid.FATAL_XIDS
