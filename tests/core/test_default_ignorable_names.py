"""Every Unicode default-ignorable code point (DerivedCoreProperties.txt, Default_Ignorable_Code_Point) shows as
nothing, so a name holding one passes for another: refused in every name `name_problem` checks, account labels
included, naming the code point and never the name."""

from __future__ import annotations

import pytest

from askback.core.connecting import checked_label
from askback.core.text import name_problem
from askback.errors import ToolError

# Unicode 15.1's Default_Ignorable_Code_Point, range by range.
DEFAULT_IGNORABLE = [
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
]
CODE_POINTS = sorted({p for first, last in DEFAULT_IGNORABLE for p in (first, (first + last) // 2, last)})


def test_a_name_holding_a_default_ignorable_code_point_is_refused_naming_it() -> None:
    for code_point in CODE_POINTS:
        name = f"work{chr(code_point)}mail"
        problem = name_problem(name, what="the name", limit=64)
        assert problem == f"the name contains the character U+{code_point:04X}, which names may not hold"
        with pytest.raises(ToolError, match=f"U\\+{code_point:04X}"):
            checked_label(name)


def test_every_code_point_of_the_list_is_refused_and_the_ones_around_it_are_not() -> None:
    refused = [p for first, last in DEFAULT_IGNORABLE for p in range(first, last + 1)]
    assert all(name_problem(f"a{chr(p)}b", what="n", limit=8) is not None for p in refused)
    assert [name_problem(f"a{c}b", what="n", limit=8) for c in "\u00ac\u034e\u17b3\U0001d172\u0301"] == [None] * 5
