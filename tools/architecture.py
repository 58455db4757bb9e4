"""
The picture of kopf's packages and their imports, drawn from the code: ``docs/architecture.svg``.

The packages are placed in the layers of the import-linter contract in
``pyproject.toml`` (top to bottom); an arrow goes from a package to each
package it imports, as the code has them -- without the arrows that follow
from others (an import of a package that is reached through another arrow
anyway), so that the picture stays readable.

``python tools/architecture.py`` writes the picture; ``--check`` fails if
the picture in the docs is not the one the code makes now (the test suite
runs it, so that the picture cannot go stale).
"""
from __future__ import annotations

import argparse
import ast
import html
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / 'kopf'
PICTURE = REPO / 'docs' / 'architecture.svg'
CONTRACT = "Layers point downwards"

BOX_WIDTH, BOX_HEIGHT, GAP_X, GAP_Y, MARGIN = 150, 34, 24, 46, 20

# What each package is, in a few words, under its name in the picture.
ROLES = {
    'testing': 'KopfRunner, test kit', '_testkit': 'control plane, cycles, plugin', '__main__': 'python -m kopf',
    'cli': 'kopf run, inspect, ...', 'on': 'decorators',
    'typed': 'typed resources', '_manifests': 'CRDs, RBAC, Deployment', '_typed': 'models, CRD schemas',
    '_tools': 'inspect, migrate', '_runtime': 'wiring, activities', '_daemons': 'daemons, timers',
    '_indexing': 'in-memory indexes', '_reconciliation': 'level-based handlers', '_replicas': 'HA, shards, fences',
    '_admission': 'webhooks',
    '_cycle': 'one object, one event', '_handlers': 'declare, call, judge', 'config': 'settings',
    '_storage': 'progress, diff-base', '_kube': 'the API client', 'errors': 'public errors',
    '_structs': 'pure data',
}


def layers() -> list[list[str]]:
    """The layers of the package (top first), as the import-linter contract has them."""
    config = tomllib.loads((REPO / 'pyproject.toml').read_text())
    for contract in config['tool']['importlinter']['contracts']:
        if contract['name'].startswith(CONTRACT):
            return [[name.strip() for name in layer.split('|')] for layer in contract['layers']]
    raise SystemExit(f"No contract named {CONTRACT!r} in pyproject.toml.")


def package_of(module: str) -> str | None:
    """The top-level part of kopf that a module belongs to (``kopf._cycle.cycle`` -> ``_cycle``)."""
    parts = module.split('.')
    return parts[1] if len(parts) > 1 and parts[0] == 'kopf' else None


def imports() -> dict[str, set[str]]:
    """Which parts of kopf each part imports (at any depth of its modules)."""
    edges: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob('*.py')):
        module = '.'.join(path.relative_to(REPO).with_suffix('').parts).removesuffix('.__init__')
        source = package_of(module)
        if source is None:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets: Iterable[str] = ()
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] if node.module != 'kopf' else [f'kopf.{a.name}' for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            for target in targets:
                imported = package_of(target)
                if imported is not None and imported != source:
                    edges.setdefault(source, set()).add(imported)
    return edges


def reduced(edges: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """The arrows that no path through other arrows implies (the transitive reduction)."""
    def reachable(start: str, skip: tuple[str, str]) -> set[str]:
        seen: set[str] = set()
        stack = [start]
        while stack:
            node = stack.pop()
            for nxt in edges.get(node, ()):
                if (node, nxt) != skip and nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return seen
    return {source: {target for target in targets if target not in reachable(source, (source, target))}
            for source, targets in edges.items()}


def draw(rows: list[list[str]], arrows: Mapping[str, set[str]]) -> str:
    """The SVG text: one row of boxes per layer, arrows from the importing box down to the imported one."""
    widest = max(len(row) for row in rows)
    width = MARGIN * 2 + widest * BOX_WIDTH + (widest - 1) * GAP_X
    height = MARGIN * 2 + len(rows) * BOX_HEIGHT + (len(rows) - 1) * GAP_Y
    places: dict[str, tuple[float, float]] = {}
    for index, row in enumerate(rows):
        row_width = len(row) * BOX_WIDTH + (len(row) - 1) * GAP_X
        left = (width - row_width) / 2
        for column, name in enumerate(row):
            places[name] = (left + column * (BOX_WIDTH + GAP_X), MARGIN + index * (BOX_HEIGHT + GAP_Y))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        '<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
        '<path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    for source in sorted(arrows):
        for target in sorted(arrows[source]):
            if source in places and target in places:
                (sx, sy), (tx, ty) = places[source], places[target]
                parts.append(f'<line x1="{sx + BOX_WIDTH / 2:.0f}" y1="{sy + BOX_HEIGHT:.0f}" '
                             f'x2="{tx + BOX_WIDTH / 2:.0f}" y2="{ty:.0f}" stroke="#888" '
                             f'marker-end="url(#arrow)"/>')
    for name, (x, y) in places.items():
        label = f'kopf.{name}'
        parts.append(f'<rect x="{x:.0f}" y="{y:.0f}" width="{BOX_WIDTH}" height="{BOX_HEIGHT}" rx="5" '
                     f'fill="{"#e8f0fe" if name.startswith("_") else "#fff3d6"}" stroke="#446"/>')
        parts.append(f'<text x="{x + BOX_WIDTH / 2:.0f}" y="{y + 14:.0f}" text-anchor="middle" '
                     f'font-weight="bold">{html.escape(label)}</text>')
        parts.append(f'<text x="{x + BOX_WIDTH / 2:.0f}" y="{y + 27:.0f}" text-anchor="middle" '
                     f'fill="#444" font-size="10">{html.escape(ROLES.get(name, ""))}</text>')
    parts.append('</svg>')
    return '\n'.join(parts) + '\n'


def picture() -> str:
    rows = layers()
    missing = sorted({name for name in imports() if not any(name in row for row in rows)})
    if missing:
        raise SystemExit(f"Parts of kopf in no layer of the contract: {', '.join(missing)}.")
    return draw(rows, reduced(imports()))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--check', action='store_true', help="fail if docs/architecture.svg is not up to date")
    args = parser.parse_args(argv)
    text = picture()
    if args.check:
        if not PICTURE.exists() or PICTURE.read_text() != text:
            print(f"{PICTURE.relative_to(REPO)} is not the picture of the code's imports: "
                  f"run python tools/architecture.py", file=sys.stderr)
            return 1
        return 0
    PICTURE.write_text(text)
    print(f"Wrote {PICTURE.relative_to(REPO)}.")
    return 0


if __name__ == '__main__':
    raise SystemExit(main(sys.argv[1:]))
