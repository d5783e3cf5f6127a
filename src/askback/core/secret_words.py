"""Does a field name, title or description ask for a credential? Shared by the questions, which refuse such form
fields when they are defined, and by `askback lint`, which flags them in code; kept free of imports so the linter
starts fast."""

from __future__ import annotations

import itertools
import re

__all__ = ["looks_secret", "words"]

# Words that mark a field as asking for a credential. Form mode must never carry these (spec: use URL mode).
_SECRET_WORDS = frozenset(
    {"password", "passwd", "passphrase", "pwd", "secret", "token", "apikey", "cvv", "cvc", "cvv2", "otp", "pin", "iban"}
)
_SECRET_PAIRS = frozenset(
    {
        ("api", "key"),
        ("access", "key"),
        ("private", "key"),
        ("secret", "key"),
        ("card", "number"),
        ("credit", "card"),
        ("debit", "card"),
        ("security", "code"),
        ("account", "number"),
        ("routing", "number"),
        ("social", "security"),
    }
)


def words(text: str) -> list[str]:
    """`text` split into lower-case words, camelCase and snake_case alike."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


def looks_secret(text: str) -> bool:
    """True when a field name, title or description asks for a password, key, token or payment credential."""
    found = words(text)
    if any(w in _SECRET_WORDS for w in found):
        return True
    return any((a, b) in _SECRET_PAIRS for a, b in itertools.pairwise(found))
