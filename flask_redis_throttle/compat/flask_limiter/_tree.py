"""Trees of text for the ``flask limiter`` commands: a label, and under it
its children, each drawn with the box-drawing branches ``├──`` and ``└──``.

This module is pure Python: it imports neither Flask nor Redis.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Node"]


@dataclass
class Node:
    """A label and the nodes under it."""

    label: str
    children: list[Node] = field(default_factory=list)

    def add(self, label: str) -> Node:
        """A new child labelled ``label``, returned to add to it in turn."""
        child = Node(label)
        self.children.append(child)
        return child

    def lines(self) -> list[str]:
        """The tree as lines of text: the label, then each child indented
        under a branch, the last one under ``└──``."""
        drawn = [self.label]
        for position, child in enumerate(self.children, 1):
            last = position == len(self.children)
            branch, rail = ("└── ", "    ") if last else ("├── ", "│   ")
            head, *rest = child.lines()
            drawn.append(branch + head)
            drawn.extend(rail + line for line in rest)
        return drawn

    def __str__(self) -> str:
        return "\n".join(self.lines())
