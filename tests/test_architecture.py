"""The import rule of docs/architecture.md, enforced on the package's import graph (read from the source, nothing
is imported): each layer imports only the layers below it, no module is part of an import cycle, and nothing in the
package imports the checkout's trees that are not installed (experiments/, benchmarks/, tests/)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = (next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())) / "gcl_monai"

#: sub-package -> the gcl_monai sub-packages it may import (docs/architecture.md, "Import rule"); every one but
#: ``utils`` itself may also import ``utils`` (added below).
ALLOWED = {
    "losses": set(),
    "gradients": set(),
    "networks": set(),
    "data": set(),
    "transforms": {"data"},  # as monai.transforms imports monai.data: H5Reader reads the paths datalists write
    "bundle": {"data"},
    "engines": {"losses", "gradients", "networks"},
    "handlers": {"engines", "losses", "gradients", "networks"},
    "probe": {"data", "transforms", "networks"},
    "diagnose": {"bundle", "data", "transforms", "engines", "handlers", "losses", "gradients", "networks", "probe"},
    "": {"losses", "gradients", "networks"},  # gcl_monai/__init__.py: the public API
}
ALLOWED = {layer: allowed | {"utils"} for layer, allowed in ALLOWED.items()}
ALLOWED["utils"] = set()


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str) -> set[str]:
    """The gcl_monai modules ``name`` imports (``from package import submodule`` counts as the submodule)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return {m for m in _parse_imports(path.read_text(), package) if m != name}


def _parse_imports(source: str, package: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names)
    return {m for m in found if m in MODULES}


def _layer(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_sub_package_has_a_rule():
    assert {_layer(m) for m in MODULES if m.count(".") >= 1 and (PACKAGE / _layer(m)).is_dir()} <= set(ALLOWED)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_layer_rule(name):
    layer = _layer(name)
    if layer not in ALLOWED:  # a top-level module such as gcl_monai/foo.py
        pytest.fail(f"{name}: a top-level module has no place in docs/architecture.md's import rule")
    crossing = {_layer(m) for m in _imports(name)} - {layer}
    assert crossing <= ALLOWED[layer], f"{name} imports {sorted(crossing - ALLOWED[layer])}: not allowed for {layer}"


def test_no_import_cycle_between_modules():
    """Package ``__init__`` files only re-export; among the modules that do the work the graph is acyclic (the
    data readers, for example, never import the layout dispatch that imports them)."""
    work = {m for m, p in MODULES.items() if p.name != "__init__.py"}
    graph = {m: {d for d in _imports(m) if d in work} for m in work}
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycle = path[path.index(dep) :] + [dep] if dep in path else [node, dep]
                pytest.fail(f"import cycle: {' -> '.join(cycle)}")
            if dep not in state:
                visit(dep, path + [dep])
        state[node] = 2

    for module in sorted(work):
        if module not in state:
            visit(module, [module])


def test_checker_sees_absolute_relative_and_submodule_imports():
    source = "import gcl_monai.engines\nfrom ..handlers import collapse\nfrom .meta_contrastive import chance_level\n"
    found = _parse_imports(source, "gcl_monai.losses")
    assert found == {"gcl_monai.engines", "gcl_monai.handlers.collapse", "gcl_monai.losses.meta_contrastive"}
    assert {_layer(m) for m in found} - {"losses"} - ALLOWED["losses"] == {"engines", "handlers"}  # both refused
    assert {"gcl_monai.data.acdc", "gcl_monai.data.json_datalist"} <= _imports("gcl_monai.data.layouts")


#: top-level trees of the checkout that are not installed: the package may not import them
NOT_INSTALLED = ("experiments", "benchmarks", "tests")


def _outside_imports(source: str) -> set[str]:
    """The top-level names of every absolute import in ``source`` (``import x.y``, ``from x.y import z``)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("name", sorted(MODULES))
def test_the_package_imports_nothing_that_is_not_installed(name):
    imported = _outside_imports(MODULES[name].read_text())
    assert not imported & set(NOT_INSTALLED), f"{name} imports {sorted(imported & set(NOT_INSTALLED))}"


def test_the_checker_sees_an_import_of_the_experiments():
    source = "import experiments.gpu_session\nfrom experiments.plan import plan_cells\nfrom .x import y\n"
    assert _outside_imports(source) & set(NOT_INSTALLED) == {"experiments"}
    assert _outside_imports("from benchmarks import bench_grad_filter\n") == {"benchmarks"}
