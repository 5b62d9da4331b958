"""fp8advisor.frameworks.formats: one enum for the formats suggest writes, verify reads and filters
simulates."""

from __future__ import annotations

import pytest

from fp8advisor.errors import ConfigError
from fp8advisor.frameworks.filters import SUBSTRING_FRAMEWORKS, Framework, parse_framework
from fp8advisor.frameworks.formats import FILE_FORMATS, SUBSTRING_FORMATS, ConfigFormat, parse_format


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("torchtitan-toml", ConfigFormat.TORCHTITAN_TOML),
        ("torchtitan-py", ConfigFormat.TORCHTITAN_PY),
        ("nemo-automodel", ConfigFormat.NEMO_AUTOMODEL),
        ("accelerate", ConfigFormat.ACCELERATE),
        ("torchao", ConfigFormat.TORCHAO),
        ("filter", ConfigFormat.FILTER),
        ("megatron", ConfigFormat.MEGATRON),
        (ConfigFormat.TORCHAO, ConfigFormat.TORCHAO),  # a member passes through
    ],
)
def test_parse_format(name, expected):
    assert parse_format(name) is expected


@pytest.mark.parametrize("name", ["torchao-auto", "nemo", ""])  # torchao-auto: a rule, no file holds it
def test_parse_format_names_only_file_formats(name):
    with pytest.raises(ConfigError, match="unknown --format") as caught:
        parse_format(name)
    assert caught.value.hint == "use one of: " + ", ".join(fmt.value for fmt in FILE_FORMATS)
    assert "torchao-auto" not in caught.value.hint


def test_one_enum_for_writer_reader_and_simulation():
    assert Framework is ConfigFormat and SUBSTRING_FRAMEWORKS is SUBSTRING_FORMATS
    assert Framework.TORCHTITAN is ConfigFormat.TORCHTITAN_TOML  # filters' names are aliases
    assert Framework.TORCHTITAN_0_3 is ConfigFormat.TORCHTITAN_PY
    assert ConfigFormat.TORCHAO_AUTO not in FILE_FORMATS and len(FILE_FORMATS) == 7


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("torchtitan", ConfigFormat.TORCHTITAN_TOML),  # filters.Framework's old values still parse
        ("torchtitan-0.3", ConfigFormat.TORCHTITAN_PY),
        ("torchao-auto", ConfigFormat.TORCHAO_AUTO),
    ],
)
def test_framework_names(name, expected):
    assert parse_framework(name) is expected
    assert expected.framework_name == name


def test_substring_formats():
    assert {fmt for fmt in ConfigFormat if fmt.uses_substring_filter} == {
        ConfigFormat.TORCHTITAN_TOML,
        ConfigFormat.TORCHTITAN_PY,
        ConfigFormat.NEMO_AUTOMODEL,
        ConfigFormat.FILTER,  # a bare list is matched as torchtitan and NeMo AutoModel match it
        ConfigFormat.TORCHAO_AUTO,
    }
