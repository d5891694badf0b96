"""The package's one-way layers (docs/architecture.md): import-linter's contract, no import cycle
between modules, and no import hidden inside a function except the lazy loads allowed below."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import autotune

REPO = Path(__file__).resolve().parents[1]
PACKAGE = Path(autotune.__file__).resolve().parent
# Loaded on first use on purpose: MPI, the BLAS libraries and the Numba-compiled kernels cost
# seconds to import and most calls never need them.
LAZY = ("autotune.backends", "autotune.kernels", "autotune.distributed", "autotune.install_probe")


def test_layer_contract_holds():
    grimp = pytest.importorskip("grimp")
    assert grimp
    lint = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(lint), "--no-cache", str(REPO / ".importlinter")], capture_output=True, text=True,
                         timeout=120, cwd=PACKAGE.parent)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_contract_names_every_package():
    contract = (REPO / ".importlinter").read_text()
    words = contract.replace(":", " ").replace("|", " ").split()
    named = {w.strip("()") for w in words if w.startswith(("autotune", "(autotune"))}
    packages = {f"autotune.{p.name}" for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    packages |= {f"autotune.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    packages |= {f"autotune.{d}" for d in ("kernels", "install_probe")}
    packages -= {"autotune.configs"}           # data only: probe profiles
    assert packages <= named, f"not in the import-linter contract: {sorted(packages - named)}"


def test_the_root_keeps_the_public_face_and_modules_stay_small():
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= 8, root
    sources = [p for base in (PACKAGE, REPO / "install_probe") for p in sorted(base.rglob("*.py"))]
    big = [f"{p}: {n}" for p in sources
           if (n := len(p.read_text().splitlines())) > 500 and "kernels" not in p.parts]
    assert not big, "modules over 500 lines: " + ", ".join(big)


def test_no_import_cycle_between_modules():
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("autotune")
    cycles = [sorted(c) for c in _strongly_connected(graph) if len(c) > 1]
    assert not cycles, f"import cycles: {cycles}"


def test_no_hidden_imports_in_functions():
    hidden = [f"{path.relative_to(PACKAGE.parent)}:{line}: {target}"
              for path in sorted(_sources()) for line, target in _function_imports(path)
              if target.startswith("autotune") and not target.startswith(LAZY)]
    assert not hidden, "imports inside functions (move them to the top of the module):\n" + "\n".join(hidden)


def _sources() -> list[Path]:
    roots = [PACKAGE] + [REPO / d for d in ("install_probe", "kernels") if (REPO / d).is_dir()]
    return [p for root in roots for p in root.rglob("*.py")]


def _module_name(path: Path) -> str:
    if path.is_relative_to(PACKAGE):
        parts = ("autotune",) + path.relative_to(PACKAGE).with_suffix("").parts
    else:
        rel = path.relative_to(REPO).with_suffix("").parts
        parts = ("autotune",) + rel
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _function_imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import statement inside a function body."""
    module = _module_name(path)
    is_pkg = path.name == "__init__.py"
    found = []
    for fn in ast.walk(ast.parse(path.read_text())):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Import):
                found += [(node.lineno, a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(module, is_pkg, node)
                found += [(node.lineno, f"{base}.{a.name}") for a in node.names]
    return found


def _absolute(module: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_pkg else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _strongly_connected(graph) -> list[set[str]]:
    """Tarjan's components of the module import graph."""
    index, low, stack, on_stack, comps = {}, {}, [], set(), []
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            comps.append(comp)

    for v in sorted(graph.modules):
        if v not in index:
            visit(v)
    return comps
