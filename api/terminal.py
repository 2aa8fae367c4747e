"""What the command line prints: stored text shown to a terminal, never obeyed by it.

Message text, reasons, actors, key names and session keys come from callers. Printed as
they are, an escape sequence in one could retitle the window, clear the screen, hide
lines or write to the clipboard, and a carriage return or a bidirectional override could
make a line read as something it is not. Every command prints through `echo`, which
writes each such character as an escape (`\\x1b`, `\\u202e`); newlines and tabs stay.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import typer

# C0 controls but tab and newline, DEL, C1 controls, and the bidirectional formatting
# controls (embeddings, overrides, isolates, marks).
OBEYED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """`text` with every character a terminal would obey written as an escape."""
    return OBEYED.sub(_escape, text)


def json_text(document: Any, *, indent: int | None = None) -> str:
    """`document` as JSON that is safe to print: what `json.dumps` leaves as it is of
    those characters (DEL, C1, bidirectional controls) written as JSON escapes, so the
    text reads back exactly."""
    text = json.dumps(document, ensure_ascii=False, indent=indent)
    return OBEYED.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def echo(message: str = "", *, err: bool = False) -> None:
    typer.echo(visible(message), err=err)


def secho(message: str, *, err: bool = False, fg: str | None = None) -> None:
    typer.secho(visible(message), err=err, fg=fg)


def counted(count: int, noun: str) -> str:
    """`count` and `noun`, singular for one: `1 session`, `2 sessions`, `1,000 events`."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def progress(message: str) -> None:
    """A progress line on stderr: on a terminal, rewritten in place by the next one; in a
    file or a pipe (no carriage return moves back there), a line of its own, or every
    line would run into the next."""
    if _stderr_is_terminal():
        typer.echo(f"\r{visible(message)}", nl=False, err=True)
    else:
        echo(message, err=True)


def progress_done() -> None:
    """Ends the line `progress` rewrote in place on a terminal (elsewhere each progress
    line ended itself)."""
    if _stderr_is_terminal():
        typer.echo("", err=True)


def _stderr_is_terminal() -> bool:
    return sys.stderr is not None and sys.stderr.isatty()


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"
