"""The package's layout as a test: no import circles, no upward imports, seams used by name.

The import graph is built from the source with ``ast`` (every ``import`` anywhere in a file,
inside functions too), so a lazy import cannot hide a dependency.
"""
import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "tinymem"

# Bottom to top. A module may import its own layer or lower ones, never a higher one.
LAYERS = [
    {"version", "backend", "checks", "fused"},
    {"random", "memory", "measure"},
    {"sparse", "plots"},
    {"autograd"},
    {"ops", "functional"},
    {"nn"},
    {"models", "optim", "data", "serialization"},
    {"techniques"},
    {"planner", "distributed", "rl", "edge"},
    {"experiments"},
    {"benchmarks", "course", "cli", "cli_help", "__main__", "__init__"},
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def module_name(path):
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def exists(module):
    path = ROOT.parent.joinpath(*module.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def import_graph():
    """``{module: {imported tinymem module, ...}}`` for every file under tinymem/."""
    graph = {}
    for path in sorted(ROOT.rglob("*.py")):
        name = module_name(path)
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.split(".")[0] == "tinymem"}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                if module.split(".")[0] != "tinymem":
                    continue
                # ``from . import nn`` imports the module tinymem.nn, not the package's __init__
                subs = [f"{module}.{a.name}" for a in node.names if exists(f"{module}.{a.name}")]
                targets |= set(subs) if len(subs) == len(node.names) else {module} | set(subs)
        graph[name] = {t for t in targets if t != name}
    return graph


def layer_of(module):
    parts = module.split(".")
    return RANK["__init__"] if len(parts) == 1 else RANK[parts[1]]


def find_cycle(graph):
    """One import circle as a list of modules, or None (depth-first search, iterative)."""
    state = {}
    for start in graph:
        if state.get(start):
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            for child in children:
                if child not in graph:
                    continue
                if state.get(child) == 1:
                    return path[path.index(child):] + [child]
                if not state.get(child):
                    state[child] = 1
                    path.append(child)
                    stack.append((child, iter(sorted(graph[child]))))
                    break
            else:
                state[node] = 2
                stack.pop()
                path.pop()
    return None


def test_every_top_level_name_has_a_layer():
    tops = {p.stem if p.is_file() else p.name for p in ROOT.iterdir()
            if (p.suffix == ".py") or (p / "__init__.py").exists()}
    assert tops <= set(RANK), f"give these a layer in LAYERS: {sorted(tops - set(RANK))}"


def test_no_import_circles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_no_upward_imports():
    upward = [f"{m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)})"
              for m, targets in import_graph().items() for t in sorted(targets)
              if t.split(".")[0] == "tinymem" and layer_of(t) > layer_of(m)]
    assert not upward, "imports that run upward:\n" + "\n".join(upward)


def test_the_checker_catches_a_circle_and_an_upward_import():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert layer_of("tinymem.autograd.tensor") < layer_of("tinymem.ops.shape")


def test_techniques_use_only_their_own_private_names():
    """A technique reaches the engine through public seams: every ``obj._name`` it reads is a
    name that the technique's own package defines."""
    pattern = re.compile(r"\._([a-z][a-z0-9_]*)")
    for package in sorted((ROOT / "techniques").iterdir()):
        files = [package] if package.suffix == ".py" else sorted(package.rglob("*.py"))
        files = [f for f in files if f.suffix == ".py"]
        if not files:
            continue
        text = "\n".join(f.read_text() for f in files)
        own = set(re.findall(r"(?:def|class) _([a-z][a-z0-9_]*)", text))
        own |= set(re.findall(r"\bself\._([a-z][a-z0-9_]*)\s*=", text))
        own |= set(re.findall(r"object\.__setattr__\(\w+, \"_([a-z][a-z0-9_]*)\"", text))
        own |= set(re.findall(r"\b\w+\._([a-z][a-z0-9_]*)\s*=", text))
        used = set(pattern.findall(text))
        foreign = sorted(used - own)
        assert not foreign, f"{package.name} uses private names it does not define: {foreign}"


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_file_is_short_and_says_what_it_holds(path):
    text = path.read_text()
    assert len(text.splitlines()) <= 400, f"{path.name} has {len(text.splitlines())} lines: split it along a seam"
    if path.name == "__main__.py":
        return
    doc = ast.get_docstring(ast.parse(text))
    assert doc and doc.strip(), f"{path} needs a first docstring line saying what it holds"


def test_no_text_points_outside_the_repository():
    pattern = re.compile(r"DESIGN\.md|\bissues?\b|\bissue's\b", re.IGNORECASE)
    hits = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in sorted(ROOT.rglob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not hits, "\n".join(hits)


def test_no_reexports_at_the_bottom_of_files():
    """Imports sit at the top of a module; only a package's __init__ gathers names."""
    late = []
    for path in sorted(ROOT.rglob("*.py")):
        body = ast.parse(path.read_text()).body
        seen_code = False
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                seen_code = True
            elif isinstance(node, (ast.Import, ast.ImportFrom)) and seen_code:
                late.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not late, "imports after the first def/class: " + ", ".join(late)


def _readme_layout():
    """The README's layout block: the fenced lines under "## Layout"."""
    text = (ROOT.parent / "README.md").read_text().split("\n## Layout\n", 1)[1]
    return text.split("```", 2)[1]


def test_the_readme_layout_names_every_package_and_module():
    layout = _readme_layout()
    words = set(re.findall(r"[\w.]+/?", layout))
    top = sorted(p.name + "/" for p in ROOT.iterdir() if (p / "__init__.py").exists())
    top += sorted(p.name for p in ROOT.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    missing = [name for name in top if name not in words]
    assert not missing, f"README's layout omits {missing}: add them under ## Layout"
    techniques = next(line for line in layout.splitlines() if line.strip().startswith("techniques/"))
    inside = sorted(p.name + "/" for p in (ROOT / "techniques").iterdir() if (p / "__init__.py").exists())
    inside += sorted(p.name for p in (ROOT / "techniques").glob("*.py") if p.name != "__init__.py")
    missing = [name for name in inside if name not in techniques.split()[1:] and name + "," not in techniques]
    assert not missing, f"README's layout line for techniques/ omits {missing}"
