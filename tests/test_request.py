"""`SuggestRequest`: one record for the settings of a suggestion. Its regenerate command reads back as the
same request; a command line merged with a header keeps the command line's values and says where they
differ."""

from __future__ import annotations

import pytest

from fp8advisor.request import DEFAULT_MIN_SPEEDUP, DEFAULT_SEQ, OPTIONS, SuggestRequest


@pytest.mark.parametrize(
    "request_",
    [
        SuggestRequest("m.py"),
        SuggestRequest(
            "my model.py:build(n=2)", 4, 2048, "rowwise", "my dir/p.json", 1.05, 2, "ctx dir", 8, "g"
        ),
        SuggestRequest("torchtitan:llama3/8B", seq=4096, recipe="tensorwise", expert_parallel=4),
    ],
)
def test_the_regenerate_command_reads_back_as_the_same_request(request_):
    line = request_.command("torchtitan-toml", "out file.toml")
    read, given, format_name = SuggestRequest.from_command(line)
    assert read == request_ and format_name == "torchtitan-toml"
    # batch, seq and recipe are always written; the others only when they are not the default
    assert {"batch", "seq", "recipe"} <= given
    defaults = SuggestRequest(request_.target)
    assert given == {"batch", "seq", "recipe"} | {
        name for name in OPTIONS if getattr(request_, name) != getattr(defaults, name)
    }


def test_chosen_settings_are_pinned_and_typed_ones_win():
    request = SuggestRequest("m.py", profile="typed")
    words = request.command_words("filter", chosen_profile="chosen", chosen_measured="ctx")
    assert words[words.index("--profile") + 1] == "typed" and words[words.index("--measured") + 1] == "ctx"
    assert "--min-speedup" not in words and request.min_speedup == DEFAULT_MIN_SPEEDUP
    assert request.seq == DEFAULT_SEQ


def test_not_a_regenerate_command_reads_as_none():
    assert SuggestRequest.from_command("fp8advisor layers m.py") is None
    assert SuggestRequest.from_command("fp8advisor suggest m.py --batch two") is None
    assert SuggestRequest.from_command("fp8advisor suggest 'unclosed") is None


def test_the_command_line_wins_over_the_header_and_each_difference_is_said_in_the_records_order():
    header = {"batch": 4, "seq": 2048, "recipe": "rowwise", "min_speedup": 1.05, "tensor_parallel": None}
    merged, from_header, differences = SuggestRequest("m.py").merge_with_header(
        {"seq": 4096, "min_speedup": 1.2, "tensor_parallel": 2, "batch": None}, header
    )
    assert (merged.batch, merged.seq, merged.recipe, merged.min_speedup, merged.tensor_parallel) == (
        4,
        4096,
        "rowwise",
        1.2,
        2,
    )
    assert from_header == ("batch", "recipe")
    assert differences == ["--seq 4096 (header: 2048)", "--min-speedup 1.2 (header: 1.05)"]


def test_a_setting_that_does_not_exist_is_refused():
    with pytest.raises(TypeError, match="tp"):
        SuggestRequest("m.py").merge_with_header({"tp": 2}, None)
