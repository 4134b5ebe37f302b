"""The layout keeps the architecture visible: no import cycles (imports inside functions
included), a short top level, pure-Python parts that import without OpenCL, and every
layer's launcher and kernels found from the layer's family name.

Everything here reads the source with ``ast``; nothing runs on a device.
"""
import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "dlprim")
TOP_LEVEL_LIMIT = 12
# generators that many layers share; any other launcher a layer uses is its own
SHARED_LAUNCHERS = {"pointwise", "copy", "gemm", "random", "reduction", "activation", "gather",
                    "quantize", "normalization"}
PURE = ["dlprim.net.graph", "dlprim.net.netconfig", "dlprim.net.autograd", "dlprim.net.memory_plan",
        "dlprim.net.weights", "dlprim.train.config", "dlprim.train.config_check",
        "dlprim.train.config_data", "dlprim.dtypes", "dlprim.utils", "dlprim.errors", "dlprim.models",
        "dlprim.lr_schedules", "dlprim.data", "dlprim.nn", "dlprim.ops", "dlprim.net.passes"]


def _modules():
    """{dotted name: path} of every module of the package."""
    found = {}
    for folder, _, files in os.walk(ROOT):
        for f in files:
            if not f.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(folder, f), os.path.dirname(ROOT))[:-3]
            parts = rel.split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = os.path.join(folder, f)
    return found


def _is_package(name, path):
    return path.endswith("__init__.py")


def _imports(name, path, modules):
    """Modules ``name`` imports anywhere in its source (functions included)."""
    tree = ast.parse(open(path).read(), path)
    package = name if _is_package(name, path) else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            for a in node.names:
                sub = "%s.%s" % (target, a.name)
                out.add(sub if sub in modules else target)
    # the root package loads its names and subpackages from tables, on first use
    if name == "dlprim":
        ns = {}
        exec(compile(ast.Module([n for n in tree.body if isinstance(n, ast.Assign)], []),
                     path, "exec"), ns)
        out.update("dlprim." + m for m in ns["SUBMODULES"])
        out.update("dlprim." + m for m in ns["_NAMES"].values())
    return {m for m in out if m in modules and m != name}


def _graph():
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycle(graph):
    """One import cycle as a list of modules, or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_graph_sees_imports():
    graph = _graph()
    # would pass vacuously if the walk found nothing: known edges, one inside a function
    assert "dlprim.net.autograd" in graph["dlprim.net.execution_plan"]
    assert "dlprim.onnx.importer" in graph["dlprim.onnx"]
    assert "dlprim.net" in graph["dlprim"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_import_cycles():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_short_top_level():
    top = sorted(f for f in os.listdir(ROOT) if f.endswith(".py"))
    assert len(top) <= TOP_LEVEL_LIMIT, "%d modules at the top of dlprim/: %s" % (len(top), top)


@pytest.mark.parametrize("module", PURE)
def test_pure_parts_import_without_opencl(module):
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in ('pyopencl', 'mako'):\n"
            "            raise ModuleNotFoundError('no ' + name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "import %s\n" % module)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(ROOT))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def _registered_families():
    """{layer family module name: [JSON types]} from the registry."""
    from dlprim.layers import REGISTRY
    families = {}
    for type_name, cls in REGISTRY.items():
        if cls.__module__.startswith("dlprim.layers."):
            families.setdefault(cls.__module__.rpartition(".")[2], []).append(type_name)
    return families


def _kernel_families(path):
    """Template names a launcher builds (``program.get(ctx, "<name>", ...)``)."""
    names = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get" and getattr(node.func.value, "id", "") == "program"
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)):
            names.add(node.args[1].value)
    return names


def test_layer_launcher_kernel_share_a_name():
    graph = _graph()
    modules = _modules()
    problems = []
    for family, types in sorted(_registered_families().items()):
        uses = {m.rpartition(".")[2] for m in graph["dlprim.layers." + family]
                if m.startswith("dlprim.core.")}
        own = uses - SHARED_LAUNCHERS
        if own - {family}:
            problems.append("layers/%s.py (%s) uses launchers %s: a layer's own launcher is "
                            "core/%s.py" % (family, ", ".join(types), sorted(own - {family}), family))
        launcher = "dlprim.core." + family
        if launcher in modules:
            if family not in uses:
                problems.append("core/%s.py exists but layers/%s.py does not use it" % (family, family))
            # kernels a family builds itself are named after it
            for algo in [launcher] + [m for m in modules if m.startswith(launcher + "_")]:
                for kernel in _kernel_families(modules[algo]):
                    if not kernel.startswith(family):
                        problems.append("%s builds kernels/%s.cl, not named after %s"
                                        % (algo, kernel, family))
    assert not problems, "\n".join(problems)


def test_every_kernel_template_has_a_launcher():
    templates = {f[:-3] for f in os.listdir(os.path.join(ROOT, "kernels")) if f.endswith(".cl")}
    built = set()
    for name, path in _modules().items():
        built |= _kernel_families(path)
    assert templates <= built, "templates no launcher builds: %s" % sorted(templates - built)


def test_architecture_page_maps_every_layer_type():
    page = open(os.path.join(os.path.dirname(ROOT), "docs", "architecture.md")).read()
    rows = {}
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 4:
            rows[cells[0]] = {t.strip() for t in cells[1].split(",")}
    for family, types in _registered_families().items():
        assert family in rows, "docs/architecture.md: no row for layers/%s.py" % family
        assert set(types) == rows[family], "docs/architecture.md: row %s lists %s, registered %s" % (
            family, sorted(rows[family]), sorted(types))


# ----- the operator library: one declaration per operator, the front ends generated
def _ocl_packets():
    pytest.importorskip("torch")
    import dlprim.torch  # noqa: F401  (the registrations)
    from dlprim.torch import implemented
    return {name.split(".")[1] for name in implemented() if name.startswith("aten.")}


def test_every_ocl_operator_has_one_declaration():
    """An ATen operator the ocl device runs is claimed by a declaration in dlprim/ops (its
    packet, or the functional packet of an in-place one): the operator has one home."""
    from dlprim import ops
    unclaimed = sorted(p for p in _ocl_packets() if not p.startswith("_foreach_")
                       and ops.by_aten(p) is None and ops.by_aten(p[:-1]) is None)
    assert not unclaimed, "ATen packets registered on ocl without a declaration in " \
        "dlprim/ops: %s" % unclaimed


def test_every_declaration_names_code_that_exists():
    """A launcher declaration's ``launch`` names a module attribute (or module) that exists;
    a pointwise declaration's ATen overloads are all generated on ocl."""
    import importlib
    from dlprim import ops
    packets = _ocl_packets()   # (imports every module a launch may name first)
    problems = []
    for op in list(ops.OPS.values()):
        if op.launch:
            module, _, attr = op.launch.rpartition(".")
            try:
                found = importlib.import_module(op.launch)
            except ImportError:
                found = getattr(importlib.import_module(module), attr, None)
            if found is None:
                problems.append("%s (ops/%s.py): launch %r does not exist"
                                % (op.name, op.family, op.launch))
    assert not problems, "\n".join(problems)
    missing = sorted("%s: %s" % (op.name, p) for op in ops.OPS.values()
                     if op.kind in ("unary", "binary", "ternary") for p in op.aten
                     if p not in packets and hasattr(__import__("torch").ops.aten, p))
    assert not missing, "declared but not registered on ocl: %s" % missing


def test_operator_table_is_generated_from_the_declarations():
    from dlprim.ops.table import markdown
    page = open(os.path.join(os.path.dirname(ROOT), "docs", "operators.md")).read()
    assert markdown() in page, "docs/operators.md's operator table is out of date: run " \
        "python -m dlprim.ops.table --write docs/operators.md"


def test_the_ocl_device_uses_only_public_core_names():
    """dlprim/torch imports no underscored name from dlprim's other parts: what it needs
    is public API there, so core can change its insides freely."""
    problems = []
    for name, path in _modules().items():
        if not name.startswith("dlprim.torch"):
            continue
        for node in ast.walk(ast.parse(open(path).read(), path)):
            if isinstance(node, ast.ImportFrom) and node.level >= 2 or (
                    isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dlprim.")
                    and not (node.module or "").startswith("dlprim.torch")):
                private = [a.name for a in node.names if a.name.startswith("_")]
                if private:
                    problems.append("%s imports %s from %s" % (name, private, node.module))
    assert not problems, "\n".join(problems)
