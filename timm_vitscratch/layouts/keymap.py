"""Key maps: how each tensor of one layout is made from the tensors of another.

A converter is a ``Dict[str, Rule]``: target name -> the source names it reads and the tensor
operation combining them (identity for a rename). Running the operations on ``meta`` tensors gives
every output shape before a single byte is read, which is what lets the writer stream.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

import torch

Op = Callable[..., torch.Tensor]


def identity(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def concat_rows(*tensors: torch.Tensor) -> torch.Tensor:
    """q, k, v (each (D, D) or (D,)) -> one fused qkv tensor, rows in q, k, v order."""
    return torch.cat(tensors, dim=0)


def third(index: int) -> Op:
    """An op taking the ``index``-th third (rows) of a fused q/k/v weight (3D, D) or bias (3D,): 0 q, 1 k, 2 v."""

    def part(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.chunk(3, dim=0)[index]

    return part


def transpose(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.t()


@dataclass(frozen=True)
class Rule:
    """One target tensor: ``op(*[source[k] for k in sources])``."""

    sources: tuple[str, ...]
    op: Op = identity

    @classmethod
    def rename(cls, source: str) -> Rule:
        return cls((source,))

    def then(self, after: Op) -> Rule:
        """This rule followed by another tensor operation."""
        first = self.op
        return Rule(self.sources, lambda *tensors: after(first(*tensors)))

    def is_rename(self) -> bool:
        return self.op is identity and len(self.sources) == 1


KeyMap = dict[str, Rule]


def weight_and_bias(rules: KeyMap, target: str, source: str) -> None:
    """Add the renames ``target.weight <- source.weight`` and ``target.bias <- source.bias``."""
    for part in ("weight", "bias"):
        rules[f"{target}.{part}"] = Rule.rename(f"{source}.{part}")


def invert_renames(rules: KeyMap) -> KeyMap:
    """The inverse of a key map made only of renames (used for exports)."""
    inverse = {}
    for target, rule in rules.items():
        if not rule.is_rename():
            raise ValueError(f"rule for {target!r} is not a plain rename and cannot be inverted")
        inverse[rule.sources[0]] = Rule.rename(target)
    return inverse


def block_indices(keys: Iterable[str], pattern: str) -> list[int]:
    """Sorted distinct block numbers in ``keys`` (``pattern`` has one group capturing the number)."""
    compiled = re.compile(pattern)
    found = set()
    for key in keys:
        match = compiled.match(key)
        if match:
            found.add(int(match.group(1)))
    return sorted(found)


def available(rule: Rule, keys: Collection[str]) -> bool:
    return all(source in keys for source in rule.sources)
