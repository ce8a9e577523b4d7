"""SPEC §2: the vocabulary, the catalog, entry-point discovery and the unknown-event gate."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from session_sql import (
    DEFAULT_CATALOG,
    Catalog,
    InvalidEventError,
    InvalidSeedError,
    Replace,
    Session,
    SessionFormatUnsupportedError,
    SurfaceError,
    fold_surface,
)
from session_sql import catalog as catalog_module

from .builders import (
    WireLog,
    new_session,
    refused,
    say,
    tool_turn,
    tool_turn_log,
    user_message,
    wire,
)

CORE = {
    "turn/start",
    "turn/end",
    "step/start",
    "step/end",
    "user/message",
    "assistant/chunk",
    "assistant/message",
    "assistant/attempt",
    "tool/call",
    "tool/result",
    "request/header",
    "request/context",
    "session/end-seed",
    "surface/removed",
}

PLUGIN = {
    "agent-preset/selected",
    "agent/inbox/spliced",
    "approval/asked",
    "approval/decided",
    "approval/policy",
    "command/done",
    "command/run",
    "compaction/end",
    "compaction/prune",
    "compaction/start",
    "compaction/summary",
    "feedback/record",
    "goal/change",
    "hook/invoked",
    "hook/result",
    "llm/retry",
    "llm/retry-started",
    "model/selection",
    "permission/preset",
    "plan/mode",
    "sandbox/mode",
    "schedule/change",
    "session/title",
    "subagent/descriptor",
    "team/member",
    "team/task",
    "todo/write",
    "tool-workflow/run-start",
    "tool-workflow/run-end",
    "tool/ptc-dispatch",
    "tool/ptc-dispatch-start",
}


# -- the default catalog -----------------------------------------------------------------------


def test_the_default_catalog_holds_the_14_core_and_31_plugin_types() -> None:
    assert len(CORE) == 14  # SPEC §2.1's 13 and §11.2's surface/removed
    assert len(PLUGIN) == 31
    assert len(DEFAULT_CATALOG) == 45
    assert set(DEFAULT_CATALOG) == CORE | PLUGIN
    assert all(name in DEFAULT_CATALOG for name in CORE)


def test_unknown_names_are_not_in_the_catalog() -> None:
    assert "vendor/thing" not in DEFAULT_CATALOG
    assert 3 not in DEFAULT_CATALOG


def test_extend_returns_a_new_catalog_and_leaves_the_original_alone() -> None:
    extended = DEFAULT_CATALOG.extend(["vendor/a", "vendor/b"])
    assert isinstance(extended, Catalog)
    assert extended is not DEFAULT_CATALOG
    assert len(extended) == 47
    assert {"vendor/a", "vendor/b"} <= set(extended)
    assert "vendor/a" not in DEFAULT_CATALOG
    assert len(DEFAULT_CATALOG) == 45


def test_extend_accepts_a_single_name_and_duplicates() -> None:
    assert set(DEFAULT_CATALOG.extend("vendor/a")) == set(DEFAULT_CATALOG) | {"vendor/a"}
    assert DEFAULT_CATALOG.extend(["todo/write"]) == DEFAULT_CATALOG


def test_catalogs_compare_by_their_types() -> None:
    assert Catalog(["a/b", "c"]) == Catalog(["c", "a/b"])
    assert hash(Catalog(["a/b"])) == hash(Catalog(["a/b"]))
    assert Catalog(["a/b"]) != Catalog(["a/c"])


def test_catalogs_are_immutable() -> None:
    catalog = Catalog(["a/b"])
    with pytest.raises(AttributeError):
        catalog.extra = 1  # type: ignore[attr-defined]
    assert not hasattr(catalog, "add")
    assert not hasattr(catalog, "remove")


@pytest.mark.parametrize("bad", ["", "has space", "/leading", "trailing/", "a//b", 5])
def test_catalog_type_names_are_checked(bad: Any) -> None:
    with pytest.raises(InvalidEventError):
        Catalog([bad])
    with pytest.raises(InvalidEventError):
        DEFAULT_CATALOG.extend([bad])


# -- entry points ------------------------------------------------------------------------------


class FakeEntryPoint:
    def __init__(self, name: str, value: Any) -> None:
        self.name = name
        self._value = value

    def load(self) -> Any:
        return self._value


@pytest.fixture
def entry_points(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[FakeEntryPoint]]:
    """Installed entry points of ``session_sql.event_types``, as the test declares them."""
    installed: list[FakeEntryPoint] = []

    def fake(*, group: str) -> list[FakeEntryPoint]:
        assert group == "session_sql.event_types"
        return installed

    monkeypatch.setattr(catalog_module, "entry_points", fake)
    catalog_module.reset_discovery()
    yield installed
    catalog_module.reset_discovery()


def test_entry_points_contribute_types(entry_points: list[FakeEntryPoint]) -> None:
    entry_points.append(FakeEntryPoint("names", ["vendor/a", "vendor/b"]))
    entry_points.append(FakeEntryPoint("factory", lambda: ("vendor/c",)))
    found = DEFAULT_CATALOG.with_entry_points()
    assert set(found) == set(DEFAULT_CATALOG) | {"vendor/a", "vendor/b", "vendor/c"}
    assert len(DEFAULT_CATALOG) == 45


def test_without_entry_points_the_catalog_is_unchanged(
    entry_points: list[FakeEntryPoint],
) -> None:
    assert DEFAULT_CATALOG.with_entry_points() == DEFAULT_CATALOG


def test_a_default_session_knows_discovered_types(entry_points: list[FakeEntryPoint]) -> None:
    entry_points.append(FakeEntryPoint("names", ["vendor/discovered"]))
    session = new_session()
    event = session.append("vendor/discovered", {"x": 1})
    assert event.ignorable is False
    assert "vendor/discovered" in session.catalog


@pytest.mark.parametrize("bad", ["vendor/a", 42, None])
def test_an_entry_point_must_give_an_iterable_of_names(
    entry_points: list[FakeEntryPoint], bad: Any
) -> None:
    entry_points.append(FakeEntryPoint("broken", bad))
    with pytest.raises(TypeError, match="broken"):
        DEFAULT_CATALOG.with_entry_points()


# -- plugin types ------------------------------------------------------------------------------


@pytest.mark.parametrize("data", [None, "text", 3, [1, {"a": None}], {"any": {"shape": [1.5]}}])
def test_plugin_data_is_opaque_json(data: Any) -> None:
    session = new_session()
    event = session.append("compaction/summary", data)
    assert event.data == data
    assert session.surface.nodes == ()


@pytest.mark.parametrize("plugin", sorted(PLUGIN))
def test_plugin_types_are_never_on_the_surface(plugin: str) -> None:
    session = new_session()
    say(session)
    with refused(session, SurfaceError):
        session.append(plugin, {}, surface_op="append")


# -- the unknown-event gate --------------------------------------------------------------------


def test_an_unknown_type_in_a_seed_is_unsupported_naming_type_and_seq() -> None:
    log = tool_turn_log()
    log.append(wire("vendor/new", len(log), {}))
    with pytest.raises(SessionFormatUnsupportedError) as info:
        Session(seed=log)
    assert not isinstance(info.value, InvalidSeedError)
    assert "vendor/new" in str(info.value)
    assert f"seq {len(log) - 1}" in str(info.value)


def test_an_unknown_ignorable_seed_event_is_kept_verbatim_and_affects_nothing() -> None:
    log = WireLog()
    say(log)
    weird = wire(
        "vendor/new",
        1,
        {"anything": [1, 2.5]},
        surface_op={"op": "replace", "start": 0, "end": 0},
        source_event_seqs=[0, 0, 99],  # provenance rules are ignored too
        ignorable=True,
    )
    log.events.append(weird)
    say(log)
    session = Session(seed=log.events)
    assert session.events[1].to_json() == weird
    assert session.surface.nodes == (0, 2)
    assert session.surface.replace_generation == 0
    assert session.message_for(session.events[1]) is None
    assert session.messages() == [log.events[0]["data"], log.events[2]["data"]]


def test_an_unknown_ignorable_event_with_append_op_stays_off_the_surface() -> None:
    seed = [
        wire("vendor/new", 0, user_message(), surface_op="append", ignorable=True),
    ]
    session = Session(seed=seed)
    assert session.surface.nodes == ()
    assert session.messages() == []
    assert fold_surface(seed).nodes == ()


@pytest.mark.parametrize(
    "event",
    [
        wire("user/message", 0, user_message(), ignorable=True),  # no surfaceOp
        wire("turn/start", 0, {"turn": 1}, surface_op="append", ignorable=True),
        wire("turn/start", 0, {"turn": 1}, source_event_seqs=[0], ignorable=True),
        wire("user/message", 0, {"not": "a message"}, surface_op="append", ignorable=True),
    ],
    ids=["eligible-without-op", "op-on-boundary", "sources-on-boundary", "bad-message"],
)
def test_a_known_type_marked_ignorable_gets_no_exemption(event: dict[str, Any]) -> None:
    with pytest.raises(InvalidSeedError) as info:
        Session(seed=[event])
    assert info.value.index == 0


def test_a_known_ignorable_event_still_joins_the_surface() -> None:
    session = Session(
        seed=[wire("user/message", 0, user_message(), surface_op="append", ignorable=True)]
    )
    assert session.surface.nodes == (0,)


def test_a_live_append_of_an_unknown_type_is_refused() -> None:
    session = new_session()
    tool_turn(session)
    with refused(session, InvalidEventError, match="ignorable=True"):
        session.append("vendor/new", {"x": 1})


def test_a_live_append_of_an_unknown_type_is_logged_with_ignorable() -> None:
    session = new_session()
    say(session)
    before = session.messages()
    event = session.append(
        "vendor/new", {"x": 1}, surface_op=Replace(0, 0), source_event_seqs=[0], ignorable=True
    )
    assert event.ignorable is True
    assert event.to_json()["ignorable"] is True
    assert event.surface_op == Replace(0, 0)  # kept verbatim, meaning ignored
    assert session.surface.nodes == (0,)
    assert session.surface.replace_generation == 0
    assert session.messages() == before
    reloaded = Session(seed=[e.to_json() for e in session.events])
    assert reloaded.surface.nodes == (0,)


def test_a_session_catalog_decides_what_is_known() -> None:
    catalog = DEFAULT_CATALOG.extend(["vendor/new"])
    session = new_session(catalog=catalog)
    assert session.catalog is catalog
    session.append("vendor/new", {"x": 1})
    assert Session(seed=[e.to_json() for e in session.events], catalog=catalog).seq == 2
    with pytest.raises(SessionFormatUnsupportedError):
        Session(seed=[e.to_json() for e in session.events])


def test_a_smaller_catalog_refuses_default_types() -> None:
    session = new_session(catalog=Catalog(["turn/start", "turn/end"]))
    with refused(session, InvalidEventError):
        session.append("todo/write", {})
