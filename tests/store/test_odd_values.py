"""Values the store accepts but the analytics cannot sum: ``usage`` is free-form JSON, so a
token count may be a float, a string, negative or huge. ``stats`` sums the sane ones in 64
bits and counts the rest as skipped, on both backends, for a tenant and for one session."""

from __future__ import annotations

from typing import Any

from session_sql.cli._stats import skipped_line
from tests.builders import assistant_data, assistant_message

USAGES: list[Any] = [
    {"inputTokens": 1.5, "outputTokens": "abc"},  # 2 skipped
    {"inputTokens": 3_000_000_000, "outputTokens": 3_000_000_000},  # past 32 bits: summed
    {"inputTokens": 5, "outputTokens": -5},  # -5 skipped
    {"inputTokens": True, "outputTokens": 3e9},  # a bool and a float: 2 skipped
    {"inputTokens": None, "outputTokens": [1]},  # null is no value; a list is skipped
    {"inputTokens": 10**12, "outputTokens": {"n": 1}},  # beyond ten digits; an object: 2
    "not an object",
    None,
    {"inputTokens": 7, "outputTokens": 2},
]


def reply_with(session: Any, usage: Any, model: str = "mod") -> None:
    data = assistant_data(assistant_message(model=model), usage=usage)
    if usage is None:
        del data["usage"]
    session.append("assistant/message", data, surface_op="append")


def test_stats_sum_sane_token_counts_in_64_bits_and_count_the_rest(store):
    session = store.create_session("odd")
    for usage in USAGES:
        reply_with(session, usage)
    other = store.create_session("plain")
    reply_with(other, {"inputTokens": 2**31, "outputTokens": 2**31}, model="other")
    for stats, skipped in ((store.stats(), 8), (store.stats("odd"), 8)):
        by_model = {m.model: m for m in stats.tokens}
        odd = by_model["mod"]
        assert odd.messages == len(USAGES)
        assert odd.input_tokens == 3_000_000_000 + 5 + 7
        assert odd.output_tokens == 3_000_000_000 + 2
        assert odd.skipped_token_counts == skipped
        assert any("8 token counts" in note for note in stats.notes)
        assert skipped_line(stats) == (
            "token counts skipped (not an integer from 0 to 9,999,999,999): 8"
        )
    whole = {m.model: m for m in store.stats().tokens}
    assert whole["other"].input_tokens == 2**31 and whole["other"].skipped_token_counts == 0
    plain = store.stats("plain")
    assert not any("skipped" in note for note in plain.notes)
    assert skipped_line(plain) is None
