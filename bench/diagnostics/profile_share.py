"""Where a request's time goes: a py-spy raw profile (`py-spy record -f raw`) of a
`session-ledger serve` under load, each sample charged to the innermost part of the HTTP
path on its stack (docs/performance.md, "Reads and writes on the event loop").

`python -m bench.diagnostics.profile_share get.raw [post.raw ...]` prints one Markdown
table per profile.
"""

from __future__ import annotations

import re
import sys
from collections import Counter

PARTS = (
    ("auth: the API key's SQL lookup", r"KeyStore\.authenticate|keystore"),
    ("rate limiter", r"Limiter\.|ratelimit"),
    ("COMMIT and its fsync", r"SQLiteConnection\.commit|SQLiteCursor\.__exit__"),
    ("the recorder: events, view rows, hash", r"insert_events"),
    ("the ledger: parse, count tokens, load, command", r"Ledger\.(_write|put_messages)"),
    ("the window read", r"context_window|Reads\.window"),
    ("the head read", r"session_head|Reads\.head"),
    ("thread hand-off", r"threading\.py|anyio/_backends|to_thread|run_in_threadpool"),
    ("response encoding", r"serialize_response|jsonable_encoder|message_list|render"),
    ("request parsing and validation", r"solve_dependencies|request_body_to_args|pydantic"),
    ("middleware", r"api/metrics|api/middleware|starlette/middleware|asyncexitstack"
     r"|_exception_handler|fastapi/_body_limit|telemetry"),
    ("routing", r"starlette/routing|fastapi/routing"),
    ("uvicorn: HTTP parsing, sending, the event loop", r"uvicorn|asyncio"),
)  # fmt: skip
PATTERNS = [(name, re.compile(pattern)) for name, pattern in PARTS]


def shares(lines: list[str]) -> tuple[int, Counter[str]]:
    """The number of samples and each part's samples."""
    total, found = 0, Counter[str]()
    for line in lines:
        stack, count = line.rstrip().rsplit(" ", 1)
        total += int(count)
        for frame in reversed(stack.split(";")):
            part = next((name for name, pattern in PATTERNS if pattern.search(frame)), None)
            if part is not None:
                found[part] += int(count)
                break
        else:
            found["other"] += int(count)
    return total, found


def main(paths: list[str]) -> None:
    for path in paths:
        with open(path) as f:
            total, found = shares([line for line in f if line.strip()])
        print(f"\n{path}: {total} samples\n\n| part | share |\n|---|---|")
        for part, count in found.most_common():
            print(f"| {part} | {100 * count / total:.0f}% |")


if __name__ == "__main__":
    main(sys.argv[1:])
