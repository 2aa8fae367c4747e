"""The README stays true: every setting is in its configuration table."""

from __future__ import annotations

from pathlib import Path

from session_ledger.api.settings import Settings

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_setting_is_documented() -> None:
    text = README.read_text(encoding="utf-8")
    missing = [
        f"LEDGER_{n.upper()}" for n in Settings.model_fields if f"`LEDGER_{n.upper()}`" not in text
    ]
    assert not missing, f"README's configuration table lacks {missing}"


def test_the_two_commands_are_shown() -> None:
    text = README.read_text(encoding="utf-8")
    assert "make serve" in text and "make test" in text
