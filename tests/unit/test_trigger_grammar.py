"""The trigger grammar and input templates (pure)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from agentfleet.graph.reserved import RESERVED_OBJECT_TYPES
from services.executor.triggers.grammar import (
    MAX_RENDERED_INPUT_BYTES,
    Trigger,
    parse_trigger,
    render_input,
    schedule_config_violations,
    trigger_violations,
)
from services.executor.triggers.schedules import next_fire_times, schedule_violations

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("on_document_ingested", Trigger(kind="object_created", name="Document")),
        ("on_object_created:Paper", Trigger(kind="object_created", name="Paper")),
        ("on_object_updated:lab.Sample-2", Trigger(kind="object_updated", name="lab.Sample-2")),
        ("on_event:invoice.paid", Trigger(kind="event", name="invoice.paid")),
    ],
)
def test_the_grammar(text: str, parsed: Trigger) -> None:
    assert parse_trigger(text) == parsed


@pytest.mark.parametrize(
    "text",
    [
        "on_document_deleted",
        "on_object_created:",
        "on_object_created:9Paper",
        "on_object_created:Paper Type",
        "on_event:" + "x" * 101,
        "ON_EVENT:x",
        "on_schedule",
        "",
    ],
)
def test_anything_else_is_refused_naming_the_field(text: str) -> None:
    found = trigger_violations(text, {}, "manifest.agents[2]")
    assert [v.field for v in found] == ["manifest.agents[2].trigger"]


def test_the_dispatchers_types_cannot_be_triggered_on() -> None:
    found = trigger_violations("on_object_updated:SpecTask", {}, "agent_definition")
    assert "dispatcher" in found[0].description


def test_the_outbox_trigger_skips_every_reserved_type() -> None:
    # The SQL names the dispatcher's types itself (no probe for their writes): the same set,
    # in the function's latest definition.
    sql = (ROOT / "migrations/0032_trigger_upkeep.up.sql").read_text()
    line = next(x for x in sql.splitlines() if x.strip().startswith("IF NEW.type IN ("))
    listed = {t.strip(" '") for t in line.split("(", 1)[1].split(")", 1)[0].split(",")}
    assert listed == set(RESERVED_OBJECT_TYPES)


def test_filter_and_template_rules() -> None:
    def fields(trigger: str | None, **config: object) -> list[str]:
        return [v.field for v in trigger_violations(trigger, config, "a")]

    assert fields(None, trigger_filter={"x": 1}) == ["a.config.trigger_filter"]
    assert fields("on_event:x", trigger_filter={"x": 1}) == ["a.config.trigger_filter"]
    assert fields("on_object_created:T", trigger_filter=[1]) == ["a.config.trigger_filter"]
    assert fields("on_object_created:T", trigger_filter={str(i): i for i in range(21)}) == [
        "a.config.trigger_filter"
    ]
    assert fields("on_object_created:T", trigger_input="{{object.secret}}") == [
        "a.config.trigger_input"
    ]
    assert fields("on_object_created:T", trigger_input="  ") == ["a.config.trigger_input"]
    assert fields("on_object_created:T", trigger_input="{{ object.properties.title }}") == []


def test_templates_paste_text_once() -> None:
    values = {
        "object": {"id": "o1", "type": "Paper", "properties": {"title": "{{object.id}}", "n": 2}},
        "payload": {"a.b": "dotted"},
    }
    assert (
        render_input("{{object.properties.title}} {{object.id}} {{object.properties.n}}", values)
        == "{{object.id}} o1 2"
    )
    assert render_input("{{payload.a.b}} {{payload.missing}}!", values) == "dotted !"
    assert render_input(None, {"payload": {"k": 1}}) == '{"payload": {"k": 1}}'
    assert render_input("{{payload.missing}}", values) == "(empty)"
    big = render_input("{{payload}}", {"payload": {"x": "y" * MAX_RENDERED_INPUT_BYTES}})
    assert len(big.encode()) == MAX_RENDERED_INPUT_BYTES


def test_cron_in_a_time_zone_across_a_dst_change() -> None:
    # 02:30 does not exist in Paris on 2026-03-29: the tick is at 03:00 local (01:00 UTC).
    after = dt.datetime(2026, 3, 28, 12, tzinfo=dt.UTC)
    ticks = next_fire_times("30 2 * * *", "Europe/Paris", after, 2)
    assert ticks == [
        dt.datetime(2026, 3, 29, 1, 0, tzinfo=dt.UTC),
        dt.datetime(2026, 3, 30, 0, 30, tzinfo=dt.UTC),
    ]


def test_schedule_checks() -> None:
    def fields(**changes: object) -> set[str]:
        wanted: dict = {
            "name": "daily",
            "agent_name": "a",
            "cron": "0 9 * * 1-5",
            "time_zone": "UTC",
            "input_text": "go",
            "catch_up": "skip",
            "min_interval_s": 60,
        } | changes
        return {v.field for v in schedule_violations(**wanted)}

    assert fields() == set()
    assert fields(cron="* * * * * */30") == {"schedule.cron"}  # every 30 s < 60 s
    assert fields(cron="* * * * * */30", min_interval_s=30) == set()
    # Minute 0 and 1 of each hour: one short gap an hour, found among the sampled ticks.
    assert fields(cron="0,1 * * * *", min_interval_s=60) == set()
    assert fields(cron="0,1 * * * *", min_interval_s=61) == {"schedule.cron"}
    assert fields(cron="@reboot") == {"schedule.cron"}
    assert fields(time_zone="Not/AZone", catch_up="all", name="9x") == {
        "schedule.time_zone",
        "schedule.catch_up",
        "schedule.name",
    }


def test_a_definitions_schedule_is_checked_naming_its_fields() -> None:
    def fields(schedule: object, min_interval_s: int = 60) -> set[str]:
        found = schedule_config_violations(
            {"schedule": schedule}, "manifest.agents[1]", min_interval_s=min_interval_s
        )
        return {v.field for v in found}

    ok = {"cron": "0 9 * * 1-5", "time_zone": "Europe/Paris", "input": "go"}
    assert fields(ok) == set()
    assert fields([1]) == {"manifest.agents[1].config.schedule"}
    assert fields({**ok, "when": "now"}) == {"manifest.agents[1].config.schedule.when"}
    assert fields({**ok, "cron": 5}) == {"manifest.agents[1].config.schedule.cron"}
    assert fields({"cron": "nope", "input": "", "catch_up": "all"}) == {
        "manifest.agents[1].config.schedule.cron",
        "manifest.agents[1].config.schedule.input",
        "manifest.agents[1].config.schedule.catch_up",
    }
    every_second = {**ok, "cron": "* * * * * *"}
    assert fields(every_second) == {"manifest.agents[1].config.schedule.cron"}
    assert fields(every_second, min_interval_s=1) == set()
    # The pure check (which may run in a worker without the settings) leaves the minimum
    # interval to the registry.
    assert trigger_violations(None, {"schedule": every_second}, "a") == []
