"""Declared core parameters: each routing core lists what a spec may set, and nothing else
reaches it.

A :class:`Param` names one setting with its type, default, unit and meaning. The run plan
checks a spec's ``routing.params`` against the declaration before anything starts
(:func:`resolve_params`): an unknown key, a wrong type or a value below the minimum is a
one-line error naming the algorithm, the key and what is allowed, so a misspelt ``theta``
can no longer run IDR at its default. Params a core derives from the overlay (SCOT
clusters, tree neighbours, addresses) are not declared: a spec cannot set them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


def is_integer(value: Any) -> bool:
    """An int, not a bool (YAML's ``true`` is Python's 1, and no count is meant by it)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite int or float, not a bool (``.nan`` and ``.inf`` are no setting)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or math.isfinite(value)  # a huge int overflows isfinite


# Each kind's test, and how an error message says what it wants.
KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "int": (is_integer, "an integer"),
    "float": (is_number, "a finite number"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "str": (lambda v: isinstance(v, str), "a string"),
}


def kind_of(value: Any) -> str | None:
    """The kind of :data:`KINDS` a default ``value`` belongs to (None: none of them)."""
    for kind in ("bool", "int", "float", "str"):  # bool first: a bool is an int too
        if KINDS[kind][0](value):
            return kind
    return None


@dataclass(frozen=True)
class Param:
    """One declared setting of a core.

    ``kind`` is ``int``, ``float``, ``bool`` or ``str``; ``default`` ``None`` means the
    core derives the value from another param (``meaning`` says how); ``minimum`` and
    ``maximum`` bound numbers (inclusive), ``above`` from below exclusively (a share that
    must be positive, where no smallest positive value means anything); ``choices``, when
    given, are the only values allowed; ``unit`` is empty for plain counts and ratios.
    """

    name: str
    kind: str
    default: Any
    unit: str
    meaning: str
    minimum: float | None = None
    choices: tuple[Any, ...] = ()
    maximum: float | None = None
    above: float | None = None

    def check(self, value: Any, where: str) -> Any:
        """``value`` as this param's kind, or ValueError naming ``where`` and the rule;
        ``None`` stands for a derived default (``default`` ``None``), so resolved params
        resolve again to themselves."""
        if value is None and self.default is None:
            return None
        ok = KINDS[self.kind][0](value)
        if ok and self.kind in ("int", "float"):
            ok = ((self.minimum is None or value >= self.minimum)
                  and (self.maximum is None or value <= self.maximum)
                  and (self.above is None or value > self.above))
        if ok and self.choices:
            ok = value in self.choices
        if not ok:
            limits = [f"{op} {x:g}" for op, x in ((">=", self.minimum), (">", self.above),
                                                  ("<=", self.maximum)) if x is not None]
            bound = f" {' and '.join(limits)}" if limits else ""
            if self.choices:
                bound = f" in {{{', '.join(map(str, self.choices))}}}"
            unit = f" ({self.unit})" if self.unit else ""
            raise ValueError(f"{where}: bad value {short_repr(value)}; allowed: {self.kind}{bound}"
                             f"{unit}, {self.meaning}")
        return float(value) if self.kind == "float" else value

    def describe(self) -> dict[str, Any]:
        """JSON-able description, for ``pubsublab plan`` and the manifest."""
        return {"name": self.name, "type": self.kind, "default": self.default,
                "unit": self.unit, "meaning": self.meaning, "minimum": self.minimum,
                **({"maximum": self.maximum} if self.maximum is not None else {}),
                **({"above": self.above} if self.above is not None else {}),
                **({"choices": list(self.choices)} if self.choices else {})}


class ParamValueError(ValueError):
    """A declared param's value that this run cannot use, found only when the core derives
    its routing from the run (a zone attribute its events lack): ``param`` names it, so
    the run plan can name the spec field."""

    def __init__(self, param: str, value: Any, allowed: str) -> None:
        super().__init__(f"bad value {short_repr(value)}; allowed: {allowed}")
        self.param = param


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters (error messages stay one short line)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def resolve_params(algorithm: str, declared: Sequence[Param], given: Mapping[str, Any]
                   ) -> dict[str, Any]:
    """``given`` checked against ``declared``, defaults filled in (declaration order).

    ValueError (one line) for an unknown key, naming the algorithm and the keys allowed,
    or for a bad value, naming the key and the rule.
    """
    by_name = {p.name: p for p in declared}
    unknown = sorted(set(given) - set(by_name))
    if unknown:
        allowed = ", ".join(by_name) or "none (this core has no params)"
        raise ValueError(f"routing.params: {algorithm} has no param(s) "
                         f"{', '.join(map(str, unknown))}; allowed: {allowed}")
    return {p.name: (p.check(given[p.name], f"routing.params.{algorithm}.{p.name}")
                     if p.name in given else p.default) for p in declared}
