"""Each default is defined once: the settings' defaults are the domain's and the
projections' own (a drift between them fails here), the settings come in their groups,
and no module writes a default again as a fallback of an environment variable."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from session_ledger.api.bootstrap import replica_env, store_env
from session_ledger.api.settings import GROUPS, Settings
from session_ledger.domain.inputs import Limits
from session_ledger.domain.ledger import Ledger
from session_ledger.projections import replicas

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = {name: field.default for name, field in Settings.model_fields.items()}


def test_every_setting_is_in_exactly_one_group() -> None:
    seen: dict[str, list[str]] = {}
    for group, model in GROUPS.items():
        for name in model.model_fields:
            seen.setdefault(name, []).append(group)
    assert set(GROUPS) == {"server", "stores", "limits", "replicas", "streams", "evidence"}
    assert set(seen) == set(Settings.model_fields), "a setting outside the groups"
    assert {n: g for n, g in seen.items() if len(g) > 1} == {}


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(Limits)])
def test_the_size_limits_are_the_domains(field: str) -> None:
    assert DEFAULTS[field] == getattr(Limits(), field)


LEDGER_ARGUMENTS = [
    name
    for name, parameter in inspect.signature(Ledger.__init__).parameters.items()
    if parameter.default not in (inspect.Parameter.empty, None) and name in DEFAULTS
]


def test_the_ledger_takes_its_settings_by_name() -> None:
    assert set(LEDGER_ARGUMENTS) >= {
        "default_tenant", "token_limit", "write_retries", "snapshot_interval",
        "stream_flush_bytes", "stream_flush_ms",
    }  # fmt: skip


@pytest.mark.parametrize("name", LEDGER_ARGUMENTS)
def test_the_ledgers_defaults_are_the_settings(name: str) -> None:
    assert DEFAULTS[name] == inspect.signature(Ledger.__init__).parameters[name].default


def test_a_ledger_built_with_no_settings_counts_with_the_default_tokenizer() -> None:
    ledger = Ledger(store_env(Settings(database_url="memory://"), create_tables=True))
    try:
        assert ledger.tokenizer.name == DEFAULTS["tokenizer"]
    finally:
        ledger.close()


def test_a_store_configured_by_default_settings_asks_what_the_replicas_assume() -> None:
    """The standbys' environment that default settings make holds the values the read
    routing takes when its environment names none."""
    env = replica_env(Settings(read_database_urls="postgresql://standby/ledger"))
    assert float(env["REPLICA_MAX_LAG_SECONDS"]) == replicas.MAX_LAG_SECONDS
    assert float(env["REPLICA_WAIT_MS"]) == replicas.WAIT_MS
    assert float(env["REPLICA_CHECK_SECONDS"]) == replicas.CHECK_SECONDS


# A literal default again where a setting or the environment is read: `env.get("X") or 5`,
# `.get("LEDGER_X", "...")`, `os.environ.get("LEDGER_X") or ...`.
FALLBACK = re.compile(
    r"""(env|environ)\.get\(\s*["'][A-Z_]+["']\s*\)\s*or\s+-?[0-9]"""
    r"""|\.get\(\s*["']LEDGER_[A-Z_]+["']\s*,"""
    r"""|getenv\(\s*["']LEDGER_[A-Z_]+["']"""
    r"""|(lock_timeout|pool_size|timeout)\s+or\s+[0-9]"""
)


def test_no_default_is_written_again_as_a_fallback() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}: {match[0]}"
        for folder in ("domain", "projections", "api")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for text in [path.read_text(encoding="utf-8")]
        for match in FALLBACK.finditer(text)
    ]
    assert found == []


@pytest.mark.parametrize(
    "url", ["sqlite://ledger.db", "sqlite:ledger.db", "postgresq://u:secret@h/db", "ledger.db"]
)
def test_a_database_url_no_store_reads_is_refused_without_echoing_it(url: str) -> None:
    """Every command and store reads the URL alike: `sqlite://name` was a file named
    `sqlite:/name`-ish for the key store and a refusal for the ledger."""
    with pytest.raises(ValidationError, match="unsupported database URL") as refused:
        Settings(database_url=url)
    (error,) = refused.value.errors()
    assert "secret" not in error["msg"]  # (what the CLI prints: the message, not the input)
    if url.startswith("sqlite"):
        assert "three slashes" in error["msg"]


@pytest.mark.parametrize(
    "url", ["memory://", "sqlite:///./var/l.db", "sqlite:////abs/l.db", "postgresql://u@h/db",
            "postgres://u@h/db"],
)  # fmt: skip
def test_the_store_urls_are_taken(url: str) -> None:
    assert Settings(database_url=url).database_url == url
