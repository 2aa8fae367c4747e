"""`LEDGER_LOG_FORMAT=json`: one JSON object a line, with the request id of the request
being answered, an access line's fields, and a traceback; plain keeps uvicorn's setup."""

from __future__ import annotations

import importlib
import json
import logging
import sys

from session_ledger.api.logs import JsonLines, current_request_id, log_config


def record(name: str, message: str, args: tuple[object, ...] = (), exc: bool = False) -> str:
    exc_info = None
    if exc:
        try:
            raise ValueError("the store said no")
        except ValueError:
            exc_info = sys.exc_info()
    made = logging.LogRecord(name, logging.WARNING, __file__, 1, message, args, exc_info)
    return JsonLines().format(made)


def test_a_line_carries_the_request_id_of_the_request_being_answered() -> None:
    outside = json.loads(record("session_ledger.api", "started"))
    token = current_request_id.set("req-42")
    try:
        inside = json.loads(record("session_ledger.api", "store unavailable on %s", ("GET",)))
    finally:
        current_request_id.reset(token)
    assert "request_id" not in outside
    assert inside["request_id"] == "req-42"
    assert inside["message"] == "store unavailable on GET"
    assert (inside["level"], inside["logger"]) == ("warning", "session_ledger.api")
    assert inside["time"].endswith("+00:00")


def test_an_access_line_has_its_fields_and_an_error_its_traceback() -> None:
    args = ("127.0.0.1:5000", "POST", "/v1/sessions/a%2Fb/messages", "1.1", 201)
    access = json.loads(record("uvicorn.access", '%s - "%s %s HTTP/%s" %d', args))
    assert {k: access[k] for k in ("client", "method", "path", "http_version", "status")} == dict(
        zip(("client", "method", "path", "http_version", "status"), args, strict=True)
    )
    failed = json.loads(record("session_ledger.api", "unhandled error", exc=True))
    assert "ValueError: the store said no" in failed["exception"]
    assert "\n" not in record("session_ledger.api", "two\nlines", exc=True)  # one line each


def test_plain_keeps_uvicorns_setup_and_json_sends_every_logger_through_one_handler() -> None:
    assert log_config("plain") is None
    config = log_config("json")
    assert config is not None
    module, _, name = config["formatters"]["json"]["()"].rpartition(".")
    assert getattr(importlib.import_module(module), name) is JsonLines
    assert config["root"]["handlers"] == ["json"]
    assert all(not c["handlers"] and c["propagate"] for c in config["loggers"].values())
