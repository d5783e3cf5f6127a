"""What the user did with a question: accepted it (with a typed value), declined it, or cancelled it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

__all__ = ["Accepted", "Cancelled", "Declined", "Outcome"]

T = TypeVar("T")


@dataclass(frozen=True)
class Accepted(Generic[T]):
    value: T
    action: Literal["accept"] = "accept"


@dataclass(frozen=True)
class Declined:
    action: Literal["decline"] = "decline"


@dataclass(frozen=True)
class Cancelled:
    action: Literal["cancel"] = "cancel"


Outcome = Accepted[T] | Declined | Cancelled
