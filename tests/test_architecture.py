"""The import graph keeps its floors: read with ``ast`` (every import, function-local ones
included, and the imports made at run time: ``importlib.import_module("tuner.x")`` with a
constant name, and the modules a ``tuner._deprecated.moved(...)`` map reads its names from), it
has no cycle, and no module imports one on a higher floor.

Floors, top to bottom (the code map: the docstring of ``tuner/__init__.py``):

* the package ``tuner`` itself — a facade: ``tuner.tune`` is ``tuner.api.tune``, imported on
  first use (so nothing below may import from the package: ``import tuner.leaderboard as
  leaderboard``, not ``from tuner import leaderboard``);
* ``cli`` and ``api`` — the command line and the Python API over the same driver;
* driver — what runs in the Ray driver: the run's phases, plan, searcher, probe, Ray runtime,
  the leaderboard recorder;
* results and the built-in workloads (``tuner.workloads``) — reading and showing rows; the
  built-in workloads and their datasets;
* trial — what runs in a Ray worker and uses torch: harness, knob application, measurement,
  failures, hardware, the plain-loop validation;
* contract — the workload contract, search spaces, cluster configs;
* base — knobs, settings, status vocabulary, errors (no torch, no Ray).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FLOORS = {
    6: {"tuner"},
    5: {"tuner.cli", "tuner.cli_options", "tuner.__main__", "tuner.api"},
    4: {"tuner.driver", "tuner.plan", "tuner.option_checks", "tuner.search_policy",
        "tuner.searcher", "tuner.staging", "tuner.probe",
        "tuner.ray_runtime", "tuner.followups",
        "tuner.recorder", "tuner.pruning", "tuner.runlock", "tuner.trial.distributed",
        "tuner.checks"},
    3: {"tuner.progress", "tuner.summary", "tuner.price_errors", "tuner.machine_load",
        "tuner.report", "tuner.report_figures", "tuner.diagnose",
        "tuner.leaderboard", "tuner.export",
        "tuner.winner", "tuner.compile_payback", "tuner.ceilings", "tuner._best_row",
        "tuner.scaling",
        "tuner.integrations", "tuner.integrations.lightning",
        "tuner.integrations.lightning_args", "tuner.integrations.lightning_fit",
        "tuner.workloads", "tuner.workloads._data", "tuner.workloads.ddpm",
        "tuner.workloads.classifier", "tuner.workloads.headpose", "tuner.workloads.chargpt",
        "tuner.workloads.segmentation3d", "tuner.workloads.datasets",
        "tuner.workloads._patches", "tuner.workloads._augment"},
    2: {"tuner.trial", "tuner.trial.harness", "tuner.trial.result_columns", "tuner.trial.apply",
        "tuner.trial.measure", "tuner.trial.prefetch",
        "tuner.trial.failures", "tuner.trial.steppers", "tuner.trial.ranks",
        "tuner.trial.compile_artifacts",
        "tuner.trial.flops", "tuner.trial.validate", "tuner.hardware", "tuner.noise",
        "tuner.harness"},  # tuner.harness: the old path of tuner.trial.harness, for one release
    1: {"tuner.workload", "tuner.workload_calls", "tuner.workload_loader", "tuner.space",
        "tuner.cluster", "tuner.data",
        "tuner.integrations.transformers"},  # the loader wraps a transformers.Trainer with it
    0: {"tuner.knobs", "tuner.settings", "tuner.status", "tuner.history", "tuner.errors",
        "tuner.followup_policy",
        "tuner.budget", "tuner.costs", "tuner.step_fit", "tuner.compile_finalists",
        "tuner.price_errors", "tuner.windows", "tuner.screening", "tuner._deprecated",
        "tuner.codegen",
        "tuner.integrations.transformers_args"},
}
FLOOR = {module: floor for floor, modules in FLOORS.items() for module in modules}

TORCH_FREE = {"tuner", "tuner.cli", "tuner.cli_options", "tuner.knobs", "tuner.settings",
              "tuner.status", "tuner.history", "tuner.followup_policy", "tuner.errors",
              "tuner.leaderboard", "tuner.progress", "tuner.noise",
              "tuner.budget", "tuner.costs", "tuner.price_errors", "tuner.windows",
              "tuner.screening",
              "tuner.step_fit", "tuner._deprecated",
              "tuner.winner", "tuner.ceilings", "tuner._best_row", "tuner.codegen",
              "tuner.compile_finalists", "tuner.compile_payback",
              "tuner.scaling", "tuner.summary", "tuner.machine_load", "tuner.workload_calls",
              "tuner.integrations.lightning_args",
              "tuner.integrations.transformers_args"}
"""Modules that must not import torch at module level (the CLI starts in 0.2 s)."""


def modules() -> dict[str, Path]:
    found = {}
    for path in (ROOT / "tuner").rglob("*.py"):  # subpackages too: tuner.workloads
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts).removesuffix(".__init__")
        found[name] = path
    return found


DEPRECATED_UP = {("tuner.workload", "tuner.trial.harness"): "make_trainable, removed in 0.4"}
"""The only arrows up allowed: a deprecated name kept for one release, read from its new, higher
module by ``tuner._deprecated.moved`` when the old name is first used (never imported
otherwise). Each must still be a ``moved`` map and nothing else (``test_the_deprecated_arrows_up
_are_moved_maps_only``)."""


def _constant_module(node: ast.AST) -> str | None:
    """The module an ``importlib.import_module("tuner.x")`` / ``import_module("tuner.x")`` call
    names with a constant string; else None."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    arg = node.args[0]
    if name == "import_module" and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    return None


def moved_targets(node: ast.AST) -> list[str]:
    """The modules a ``moved(__name__, {...})`` call reads its names from: the constant values
    of its dict (a literal or a comprehension); else []."""
    if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "moved"
            and len(node.args) == 2):
        return []
    out, todo = [], [node.args[1]]
    while todo:  # a dict literal, a comprehension, and either unpacked in a literal (**{...})
        names = todo.pop()
        if isinstance(names, ast.Dict):
            todo.extend(names.values)
        elif isinstance(names, ast.DictComp):
            todo.append(names.value)
        elif isinstance(names, ast.Constant) and isinstance(names.value, str):
            out.append(names.value)
    return out


def imports(path: Path, known: set[str], *, top_level_only: bool = False,
            aliases: bool = True) -> set[str]:
    """Project modules ``path`` imports (``from tuner import x`` counts as ``tuner.x``); unless
    ``top_level_only``, the run-time ones too (``_constant_module``) and, with ``aliases``,
    the modules its ``moved`` maps read from (``tuner._deprecated`` itself excepted: it imports
    whatever it is given)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    deprecation_helper = path.name == "_deprecated.py" and path.parent.name == "tuner"
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif top_level_only or deprecation_helper:
            continue
        elif (module := _constant_module(node)) is not None:
            targets = [module]
        elif aliases and (found := moved_targets(node)):
            targets = found
        else:
            continue
        for target in targets:
            while target and target not in known and "." in target:
                target = target.rpartition(".")[0]
            if target in known or target.split(".")[0] in ("torch", "ray"):
                out.add(target)
    return out


def graph(*, aliases: bool = True) -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(path, set(mods), aliases=aliases) - {name}
            for name, path in mods.items()}


def test_every_module_has_a_floor():
    missing = sorted(set(modules()) - set(FLOOR))
    assert not missing, f"give these modules a floor in tests/test_architecture.py: {missing}"


def upward_imports(edges: dict[str, set[str]], floor: dict[str, int]) -> list[str]:
    return sorted(f"{a} (floor {floor[a]}) imports {b} (floor {floor[b]})"
                  for a, targets in edges.items() for b in targets
                  if b in floor and a in floor and floor[b] > floor[a])


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path (first module repeated at the end), or None."""
    state: dict[str, int] = {}   # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                trail = path + [node]
                return trail[trail.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt, path + [node])):
                return cycle
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (cycle := visit(start, [])):
            return cycle
    return None


def _allowed(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """``edges`` without the deprecated arrows up (``DEPRECATED_UP``)."""
    return {a: {b for b in targets if (a, b) not in DEPRECATED_UP} for a, targets in edges.items()}


def test_no_module_imports_one_on_a_higher_floor():
    assert upward_imports(_allowed(graph()), FLOOR) == []


def test_the_import_graph_has_no_cycle():
    """Imports, run-time ones included, make no cycle. A ``moved`` map does not count here: it
    imports its module when an old name is first read, never while its own module loads (a
    split module's old home points to the new one, which imports the old one's rest)."""
    edges = {a: {b for b in targets if b in FLOOR} for a, targets in graph(aliases=False).items()}
    cycle = find_cycle(edges)
    assert cycle is None, " -> ".join(cycle)


def test_the_deprecated_arrows_up_are_moved_maps_only():
    """Each allowed arrow up is still there, and only as a ``moved`` map: the module imports
    nothing of the higher floor otherwise (not even at run time)."""
    mods = modules()
    for (low, high) in DEPRECATED_UP:
        assert high in imports(mods[low], set(mods)), (low, high)
        assert high not in imports(mods[low], set(mods), aliases=False), (low, high)


def test_torch_free_modules_import_neither_torch_nor_ray_at_module_level():
    mods = modules()
    heavy = {}
    for name in TORCH_FREE:
        top = imports(mods[name], set(mods), top_level_only=True)
        bad = sorted(t for t in top if t.split(".")[0] in ("torch", "ray")
                     or (t in FLOOR and t not in TORCH_FREE | {"tuner"}))
        if bad:
            heavy[name] = bad
    assert not heavy, heavy


def test_the_checks_catch_an_upward_import_and_a_cycle(tmp_path):
    fake = tmp_path / "bad.py"
    fake.write_text("import tuner.knobs\n\ndef f():\n    from tuner.cli import main\n")
    seen = imports(fake, {"tuner.cli", "tuner.knobs"})
    assert seen == {"tuner.cli", "tuner.knobs"}                  # function-local imports count
    run_time = tmp_path / "run_time.py"
    run_time.write_text("import importlib\nfrom importlib import import_module\n"
                        "from tuner._deprecated import moved\n\n"
                        "def f():\n    return importlib.import_module('tuner.trial.harness').x\n\n"
                        "def g(name):\n"
                        "    return import_module('tuner.cli'), import_module(name)\n\n"
                        "__getattr__ = moved(__name__, {n: 'tuner.api' for n in ('a', 'b')})\n"
                        "_OLD = moved(__name__, {'c': 'tuner.driver',\n"
                        "                        **{n: 'tuner.plan' for n in 'd'}})\n")
    known = {"tuner.trial.harness", "tuner.cli", "tuner.api", "tuner.driver", "tuner.plan",
             "tuner._deprecated"}
    assert imports(run_time, known) == known                      # run-time imports count
    assert imports(run_time, known, aliases=False) == known - {"tuner.api", "tuner.driver",
                                                               "tuner.plan"}
    assert imports(run_time, known, top_level_only=True) == {"tuner._deprecated"}
    assert upward_imports({"tuner.knobs": seen}, FLOOR) == [
        "tuner.knobs (floor 0) imports tuner.cli (floor 5)"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_distribution_installs_only_the_tuner_package_with_the_spaces_as_its_data():
    """Nothing generic at the top of site-packages: the built-in workloads are
    ``tuner.workloads`` and their search spaces its package data."""
    import tomllib
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert all(p == "tuner" or p.startswith("tuner.")
               for p in setuptools["packages"]["find"]["include"])
    assert set(setuptools["package-data"]) == {"tuner.workloads"}
    spaces = ROOT / "tuner" / "workloads" / "spaces"
    assert {"ddpm.yaml", "chargpt.yaml", "README.md"} <= {p.name for p in spaces.iterdir()}
    assert not (ROOT / "workloads").exists() and not (ROOT / "search_spaces").exists()


def test_the_contract_and_the_builtins_import_nothing_of_the_trial():
    """The workload contract, its finder and the built-in workloads (with their datasets) sit
    below the trial: none of them imports a module of the trial's floor, even at run time, or
    one above it (the deprecated ``make_trainable`` alias aside, ``DEPRECATED_UP``)."""
    mods = modules()
    contract = [m for m in mods if m in ("tuner.workload", "tuner.workload_loader")
                or m == "tuner.workloads" or m.startswith("tuner.workloads.")]
    reach = {m: sorted(t for t in imports(mods[m], set(mods))
                       if FLOOR.get(t, 0) >= 2 and t not in contract
                       and (m, t) not in DEPRECATED_UP) for m in contract}
    assert {m: r for m, r in reach.items() if r} == {}
