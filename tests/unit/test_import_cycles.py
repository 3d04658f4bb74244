"""No module of the server imports itself through others: the import graph has no cycle.

import-linter's contracts hold the layers apart, but a cycle inside one layer (a store and its
upcasters, a page and the app that mounts it) passes them all. This test reads the same graph
import-linter builds (grimp's) and fails naming every cycle it finds, shortest path first.

Imports under `if TYPE_CHECKING:` count. They cost nothing at run time, but they are how a
cycle hides: two modules that need each other's names are one responsibility split in two,
or share a third that belongs in its own module, whichever branch the import sits in.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Set

import grimp

PACKAGES = ("domain", "events", "service")


def _imports(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    return {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}


def _reachable(imports: Mapping[str, Set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen: set[str] = set()
    frontier = [start]
    while frontier:
        for target in imports.get(frontier.pop(), ()):
            if target not in seen:
                seen.add(target)
                frontier.append(target)
    return seen


def strongly_connected(imports: Mapping[str, Set[str]]) -> Iterator[set[str]]:
    """Every set of two or more modules that each import all the others, through others.

    By reachability from each module: quadratic, and plain to read, which matters more than
    speed for a graph of a few hundred modules.
    """
    reach = {module: _reachable(imports, module) for module in imports}
    placed: set[str] = set()
    for module in sorted(imports):
        if module in placed or module not in reach[module]:
            continue
        component = {other for other in reach[module] if module in reach.get(other, ())}
        placed |= component
        if len(component) > 1:
            yield component


def shortest_cycle(imports: Mapping[str, Set[str]], component: Set[str]) -> list[str]:
    """The shortest cycle through the component's first module, as the modules on it in order."""
    start = min(component)
    paths: dict[str, list[str]] = {start: [start]}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for module in frontier:
            for target in sorted(imports[module] & component):
                if target == start:
                    return [*paths[module], start]
                if target not in paths:
                    paths[target] = [*paths[module], target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"{sorted(component)} is not strongly connected")


def cycles(imports: Mapping[str, Set[str]]) -> list[str]:
    """One line per cycle in the graph: its modules, each importing the next."""
    return sorted(
        " -> ".join(shortest_cycle(imports, component)) for component in strongly_connected(imports)
    )


def test_the_server_has_no_import_cycle() -> None:
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=False)
    found = cycles(_imports(graph))
    assert not found, "import cycles:\n" + "\n".join(found)


def test_a_cycle_is_found_and_named() -> None:
    imports = {
        "a": {"b"},
        "b": {"c"},
        "c": {"a", "d"},
        "d": set(),
        "e": {"f"},
        "f": {"e"},
    }
    assert cycles(imports) == ["a -> b -> c -> a", "e -> f -> e"]


def test_a_chain_without_a_way_back_is_no_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
