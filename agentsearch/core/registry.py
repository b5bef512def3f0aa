"""A small named registry, shared by the extension points (replay kinds, losses, answer
rewards): built-in names are reserved, a taken name needs ``overwrite=True``, and an unknown
name is an error that lists the known ones and says how to register your own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """``what`` names the kind of entry in messages ("replay kind"); ``how`` says where to
    register one (e.g. "agentsearch.replay.register_replay")."""

    def __init__(self, what: str, how: str):
        self.what, self.how = what, how
        self._entries: dict[str, T] = {}
        self._builtin: list[str] = []

    def add(self, name: str, entry: T, *, overwrite: bool = False, builtin: bool = False) -> T:
        if name in self._builtin:
            raise ValueError(f"{name!r} is a built-in {self.what}; pick another name")
        if name in self._entries and not overwrite:
            raise ValueError(f"{self.what} {name!r} is already registered; pass overwrite=True to "
                             "replace it")
        self._entries[name] = entry
        if builtin:
            self._builtin.append(name)
        return entry

    def register(self, name: str, fn: Callable | None = None, *, overwrite: bool = False,
                 builtin: bool = False, wrap: Callable[[Callable], T] | None = None) -> Any:
        """Register the callable ``fn`` (stored as ``wrap(fn)`` if given) and return ``fn``;
        without ``fn``, a decorator that does so."""
        def add(f: Callable) -> Callable:
            if not callable(f):
                raise TypeError(f"registering {self.what} {name!r}: it must be callable, got {f!r}")
            self.add(name, wrap(f) if wrap is not None else f, overwrite=overwrite, builtin=builtin)
            return f

        return add if fn is None else add(fn)

    def remove(self, name: str) -> None:
        if name in self._builtin:
            raise ValueError(f"{name!r} is a built-in {self.what} and cannot be removed")
        if self._entries.pop(name, None) is None:
            raise ValueError(f"no {self.what} {name!r} is registered; known: {self.names()}")

    def names(self) -> list[str]:
        """The built-ins in registration order, then the user's, sorted."""
        return self._builtin + sorted(k for k in self._entries if k not in self._builtin)

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise ValueError(f"unknown {self.what} {name!r}; choose from {self.names()} "
                             f"(or register your own with {self.how})") from None
