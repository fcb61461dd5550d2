"""The Python client's modules form a line, lowest first (LINE below): a module of client/python/devplace
imports only modules below it in the line, never one above it, so the package has no import cycle and a
call runs down the line (``devplace.pick()`` in _client.py calls _pick.py; _pick.py knows nothing of
Client). Every import counts: at the top of a module, inside a function, under ``if TYPE_CHECKING:``,
relative (``from ._client import Client``) or absolute (``from devplace._client import Client``). The
source files are read (ast), nothing is imported. A new module takes its place in LINE (and in
docs/ARCHITECTURE.md's client/python/ row, which lists the modules in the same order)."""

import ast
import os
import tempfile
import unittest

PACKAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python", "devplace")

# Lowest first. "v1": the stubs generated from proto/devplace/v1/devplace.proto (the subpackage, one
# module of the line); "_placement_env": written by the build (gen_placement_env.cc), not in the source.
LINE = [
    "v1", "_placement_env", "errors", "_read", "_connect_diagnosis", "_target", "_python_environment",
    "_device_metadata", "_resolve_options", "_grpc_connection", "_resolution", "_pick", "_client", "__init__",
]
GENERATED = {"_placement_env"}


def modules(package):
    """{module of the line: [its source files]}: the package's top-level .py files, and v1/'s as "v1"."""
    found = {}
    for name in sorted(os.listdir(package)):
        path = os.path.join(package, name)
        if name.endswith(".py"):
            found.setdefault(name[:-3], []).append(path)
        elif os.path.isdir(path) and os.path.exists(os.path.join(path, "__init__.py")):
            found.setdefault(name, []).extend(os.path.join(path, f) for f in sorted(os.listdir(path)) if f.endswith(".py"))
    return found


def imported(tree, known):
    """The modules of the package (names in `known`) that a module's syntax tree imports, with the line."""
    out = []

    def add(name, node):
        if name in known:
            out.append((name, node.lineno))

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level > 1:
                out.append(("(from " + "." * node.level + (node.module or "") + ": above the package)", node.lineno))
            elif node.level == 1 or (node.module or "").split(".")[0] == "devplace":
                parts = (node.module or "").split(".")[0 if node.level == 1 else 1:]
                if parts and parts[0]:
                    add(parts[0], node)  # from .x import y, from devplace.x import y
                else:
                    for alias in node.names:  # from . import x, from devplace import x
                        add(alias.name if alias.name in known else "__init__", node)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "devplace":
                    add(parts[1] if len(parts) > 1 else "__init__", node)
    return out


def graph(package):
    """{module: {module it imports: first line}} over the package's source files."""
    found = modules(package)
    known = set(found) | set(LINE)
    edges = {}
    for module, paths in found.items():
        edges[module] = {}
        for path in paths:
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            for target, line in imported(tree, known):
                if target != module:
                    edges[module].setdefault(target, f"{os.path.relpath(path, package)}:{line}")
    return edges


def cycle(edges):
    """One import cycle as [a, b, ..., a], or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for target in sorted(edges.get(node, {})):
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def problems(package):
    """Every breach of the line in `package`, one line each (empty: the modules form the line)."""
    edges = graph(package)
    out = []
    for module in sorted(edges):
        if module not in LINE:
            out.append(f"{module}: not in the line; give it its place in LINE (tests/python/test_layering.py)")
    for module in LINE:
        if module not in edges and module not in GENERATED:
            out.append(f"{module}: in LINE but not in the package")
    for module, targets in sorted(edges.items()):
        for target, where in sorted(targets.items()):
            if target not in LINE or module not in LINE:
                if target.startswith("("):
                    out.append(f"{where}: {target}")
                continue
            if LINE.index(target) > LINE.index(module):
                out.append(f"{where}: {module} imports {target}, which is above it in the line")
    found = cycle(edges)
    if found:
        out.append("import cycle: " + " -> ".join(found))
    return out


class ModuleLine(unittest.TestCase):
    def test_the_package_forms_the_line(self):
        self.assertTrue(os.path.exists(os.path.join(PACKAGE, "_client.py")), PACKAGE)
        self.assertEqual(problems(PACKAGE), [])

    def test_the_pick_and_the_answer_know_nothing_of_the_client(self):
        edges = graph(PACKAGE)
        for module in ("_pick", "_resolution"):
            self.assertNotIn("_client", edges[module], module)
        self.assertIn("_pick", edges["_client"])  # _client calls them
        self.assertIn("_resolution", edges["_client"])

    def check(self, files):
        """problems() of a package made of `files` ({name: source}), every module of LINE present."""
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "v1"))
            for name in LINE:
                if name != "v1":
                    files.setdefault(name + ".py", "")
            files.setdefault("v1/__init__.py", "")
            for name, text in files.items():
                with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                    f.write(text)
            return problems(d)

    def test_a_clean_line_passes(self):
        self.assertEqual(self.check({"_client.py": "from ._pick import Pick\nfrom .v1 import devplace_pb2\n",
                                     "_pick.py": "from . import errors\n"}), [])

    def test_an_import_up_the_line_fails_wherever_it_stands(self):
        for text in ("from ._client import Client\n",
                     "def pick():\n    from ._client import Client  # noqa\n",
                     "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._client import Client\n",
                     "from devplace._client import Client\n",
                     "import devplace._client\n",
                     "from . import _client\n",
                     "import devplace\n"):
            with self.subTest(text):
                found = self.check({"_pick.py": text})
                self.assertTrue(any("_pick imports " in p and "above it in the line" in p for p in found), found)

    def test_a_cycle_fails(self):
        found = self.check({"_pick.py": "def pick():\n    from ._client import Client\n",
                            "_client.py": "from ._pick import Pick\n"})
        self.assertIn("import cycle: _client -> _pick -> _client", found)

    def test_a_module_outside_the_line_fails(self):
        found = self.check({"_lease.py": "from . import errors\n"})
        self.assertIn("_lease: not in the line; give it its place in LINE (tests/python/test_layering.py)", found)

    def test_an_import_from_above_the_package_fails(self):
        found = self.check({"_pick.py": "from .. import something\n"})
        self.assertTrue(any("above the package" in p for p in found), found)


if __name__ == "__main__":
    unittest.main()
