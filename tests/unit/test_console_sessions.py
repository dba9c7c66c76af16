"""The console's session store, settings and origin check (services/console), alone."""

from __future__ import annotations

import time

import pytest

from agentfleet.config import ConfigError
from agentfleet.console_settings import load_console_settings
from services.console.security import host_name, same_origin
from services.console.sessions import SessionStore


def test_sessions_are_random_bounded_and_expire(monkeypatch: pytest.MonkeyPatch) -> None:
    store = SessionStore(idle_s=60, max_age_s=3600, max_sessions=2)
    first = store.create(project_id="p", token="t1")
    second = store.create(project_id="p", token="t2")
    assert first.id != second.id
    assert first.csrf != first.id
    assert len(first.id) >= 40
    assert store.get(first.id) is first  # first is now the most recently used
    store.create(project_id="p", token="t3")
    assert store.get(second.id) is None  # the least recently used went
    assert store.get(first.id) is first
    now = time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: now + 61)
    assert store.get(first.id) is None  # idle too long
    assert store.get(None) is None
    assert store.get("") is None


def test_the_absolute_age_ends_a_session_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    store = SessionStore(idle_s=60, max_age_s=100, max_sessions=10)
    start = time.monotonic()
    session = store.create(project_id="p", token="t")
    for offset, alive in ((50, True), (100, True), (101, False)):
        monkeypatch.setattr(time, "monotonic", lambda offset=offset: start + offset)
        assert (store.get(session.id) is session) is alive, offset


def test_drop_token_signs_out_every_session_of_it() -> None:
    store = SessionStore(idle_s=60, max_age_s=3600, max_sessions=10)
    a = store.create(project_id="p", token="revoked")
    b = store.create(project_id="p", token="revoked")
    c = store.create(project_id="p", token="good")
    store.drop_token("revoked")
    assert (store.get(a.id), store.get(b.id), store.get(c.id)) == (None, None, c)


def test_csrf_compare() -> None:
    session = SessionStore(idle_s=60, max_age_s=60, max_sessions=1).create(
        project_id="p", token="t"
    )
    assert session.csrf_matches(session.csrf)
    assert not session.csrf_matches(None)
    assert not session.csrf_matches("")
    assert not session.csrf_matches(session.csrf + "x")


@pytest.mark.parametrize(
    ("origin", "host", "same"),
    [
        ("http://127.0.0.1:8080", "127.0.0.1:8080", True),
        ("https://console.example.com", "console.example.com", True),
        ("https://Console.Example.com", "console.example.com", True),
        ("https://evil.example", "console.example.com", False),
        ("https://console.example.com.evil.example", "console.example.com", False),
        ("http://127.0.0.1:8081", "127.0.0.1:8080", False),
        ("null", "127.0.0.1:8080", False),
        (None, "127.0.0.1:8080", False),
        ("javascript://127.0.0.1:8080", "127.0.0.1:8080", False),
        ("http://127.0.0.1:8080", None, False),
    ],
)
def test_same_origin(origin: str | None, host: str | None, same: bool) -> None:
    assert same_origin(origin, host) is same


def test_settings_defaults_and_errors() -> None:
    settings = load_console_settings({})
    assert settings.port == 8080
    assert settings.secure_cookies is False
    assert load_console_settings({"AGENTFLEET_CONSOLE_SECURE_COOKIES": "on"}).secure_cookies
    for name, bad in (
        ("AGENTFLEET_CONSOLE_PORT", "70000"),
        ("AGENTFLEET_CONSOLE_SECURE_COOKIES", "yes"),
        ("AGENTFLEET_CONSOLE_MAX_STREAMS", "0"),
    ):
        with pytest.raises(ConfigError, match=name):
            load_console_settings({name: bad})


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("127.0.0.1:8080", "127.0.0.1"),
        ("LOCALHOST:8080", "localhost"),
        ("[::1]:8080", "[::1]"),
        ("[::1]", "[::1]"),
        ("console.example.com", "console.example.com"),
        ("", ""),
        (None, ""),
    ],
)
def test_host_name(header: str | None, name: str) -> None:
    assert host_name(header) == name


def test_allowed_hosts_setting() -> None:
    assert load_console_settings({}).allowed_hosts == ("127.0.0.1", "localhost", "[::1]")
    parsed = load_console_settings({"AGENTFLEET_CONSOLE_ALLOWED_HOSTS": "Console.Example.com, *"})
    assert parsed.allowed_hosts == ("console.example.com", "*")
    for bad in (",", "example.com:443"):
        with pytest.raises(ConfigError, match="AGENTFLEET_CONSOLE_ALLOWED_HOSTS"):
            load_console_settings({"AGENTFLEET_CONSOLE_ALLOWED_HOSTS": bad})
