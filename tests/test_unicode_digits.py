"""
Strings of Unicode digits that ``str.isdigit()`` accepts but ``int()`` rejects ("²"), and digit strings
longer than ``int()`` converts, must be treated as invalid input, never raise.
"""

from __future__ import annotations

import pytest

from gasoline.core.extension.commands import command_number
from gasoline.core.errors import GasolineError
from gasoline.tools.context import ToolContext


@pytest.mark.parametrize("value", ["q-²", "q-¹²", "q-" + "9" * 5000])
def test_command_number_refuses_non_decimal_or_huge_ids(value):
    assert command_number(value) is None


def test_command_number_reads_a_normal_id():
    assert command_number("q-42") == 42


@pytest.mark.parametrize("value", ["²", "-²", "1" * 5000])
def test_int_arg_rejects_superscripts_and_huge_digit_strings_as_invalid_param(value):
    with pytest.raises(GasolineError) as caught:
        ToolContext.int_arg({"limit": value}, "limit", 10, 1, 1000)
    assert caught.value.code == "invalid_param"


def test_int_arg_accepts_a_decimal_string():
    assert ToolContext.int_arg({"limit": "25"}, "limit", 10, 1, 1000) == 25
