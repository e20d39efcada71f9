"""One small registry type for everything a paper adds by name: models, image inputs,
similarities, loss terms, metrics, figure kinds.

Register under a name (a duplicate name is an error), look up by name (an unknown name is a
``HarnessError`` that lists the known ones). Modules register their entries when imported; the
package that owns a registry imports its entry modules, so looking up never depends on who
imported what first.

What the DAG build reads (a model's image input and description, a loss term's parameters, a
metric's direction) is declared in torch-free registries; the implementation registry of the same
names is built with ``declared=`` that registry, so an implementation can only be registered
under a declared name (the tests check that every declared name has one).
"""
from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

from methods.errors import HarnessError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, declared: "Registry | None" = None):
        self.kind = kind  # what an entry is, for messages ("model", "loss term", ...)
        self.declared = declared  # the registry of declarations these entries implement, if any
        self._entries: dict[str, T] = {}

    def register(self, name: str, entry: T | None = None) -> Callable[[T], T] | T:
        """``register(name, entry)``, or ``@register(name)`` as a decorator; returns the entry."""
        def add(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} '{name}' is registered twice")
            if self.declared is not None and name not in self.declared:
                raise ValueError(f"{self.kind} '{name}' is implemented but not declared (declared: "
                                 f"{', '.join(self.declared.names())})")
            self._entries[name] = obj
            return obj

        return add(entry) if entry is not None else add

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise HarnessError(f"unknown {self.kind} '{name}'; known: {', '.join(self.names()) or 'none'}") from None

    __getitem__ = get

    def names(self) -> list[str]:
        return sorted(self._entries)

    def items(self) -> Iterator[tuple[str, T]]:
        return iter(sorted(self._entries.items()))

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)
