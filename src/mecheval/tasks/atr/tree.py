"""An ATR example's dependency tree, exported for people (text) and programs (parent pointers)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DependencyTree:
    """The dependency tree over a document's context terminals (positions are sequence positions).

    tokens: the decoded sequence; parent[p]: position of the head of the terminal at p (-1 for the
    root and for non-terminal positions); depth[p]: derivation depth (0 off the context);
    key / value: the positions of the queried terminal and of its head.
    """

    tokens: list[str]
    parent: list[int]
    depth: list[int]
    key: int
    value: int

    @property
    def positions(self) -> list[int]:
        """Positions of the context terminals."""
        return [p for p, d in enumerate(self.depth) if d > 0]

    @property
    def root(self) -> int:
        return next(p for p in self.positions if self.parent[p] < 0)

    def children(self, p: int) -> list[int]:
        return [c for c in self.positions if self.parent[c] == p]

    def render(self) -> str:
        """An indented text tree, heads above their dependents (left to right); marks key/value."""
        lines: list[str] = []

        def label(p: int) -> str:
            mark = " [key]" if p == self.key else " [value]" if p == self.value else ""
            return f"{self.tokens[p]} @{p}{mark}"

        def walk(p: int, prefix: str, last: bool, top: bool) -> None:
            lines.append(label(p) if top else f"{prefix}{'└── ' if last else '├── '}{label(p)}")
            kids = self.children(p)
            inner = "" if top else prefix + ("    " if last else "│   ")
            for i, c in enumerate(kids):
                walk(c, inner, i == len(kids) - 1, False)

        walk(self.root, "", True, True)
        return "\n".join(lines)
