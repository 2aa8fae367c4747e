"""Medians, ratios taken pair by pair within each repetition, the targets, the tables."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from .workloads import Cell

# Cells indexed as cells[store][workload] -> one Cell per repetition.
Cells = dict[str, dict[str, list[Cell]]]

OURS = {"sqlite": "session-ledger sqlite", "postgres": "session-ledger postgres"}
MEMORY = "session-ledger memory"  # a put's Python with no I/O: the CPU's share of W1
REFERENCE = "ref"  # a Target op: a ratio reported beside the targets, judged by none
RAW = {"sqlite": "raw sqlite3 WAL+FULL", "postgres": "raw psycopg INSERT+COMMIT"}


@dataclass(frozen=True)
class Target:
    """ratio = a / b per repetition; it holds when the median meets `op threshold`."""

    label: str
    a: tuple[str, str]  # (store, workload)
    b: tuple[str, str]
    op: str  # ">=", "<=" or REFERENCE
    threshold: float
    peer: str = ""  # set for "faster than this peer": a / b is then our speed-up

    def ratios(self, cells: Cells) -> list[tuple[float, bool]]:
        """(ratio, predicted?) for every repetition where both cells have a figure."""
        left = cells.get(self.a[0], {}).get(self.a[1], [])
        right = cells.get(self.b[0], {}).get(self.b[1], [])
        out = []
        for x, y in zip(left, right, strict=False):
            vx, vy = x.best(), y.best()
            if vx is not None and vy:
                out.append((vx / vy, x.value is None or y.value is None))
        return out


def targets(cells: Cells, peers: list[tuple[str, str, bool]], sizes: list[int]) -> list[Target]:
    """The issue's targets for the stores in this run; peers: (name, backend, W4 comparable)."""
    out: list[Target] = []
    for db, title in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        ours, raw = OURS[db], RAW[db]
        if ours not in cells:
            continue
        limit = 0.5 if db == "sqlite" else 0.4
        out.append(Target(f"W1 {title}: ours / raw msg/s", (ours, "W1"), (raw, "W1"), ">=", limit))
        if MEMORY in cells:  # what W1 would be if a put's commit cost nothing
            out.append(
                Target(f"W1 {title} reference: memory store (no I/O) / raw msg/s",
                       (MEMORY, "W1"), (raw, "W1"), REFERENCE, limit)
            )  # fmt: skip
        if db == "postgres":
            out.append(
                Target("W1x4 PostgreSQL: ours / raw 4 connections msg/s", (ours, "W1x4"),
                       (raw, "W1x4"), ">=", 0.5)
            )  # fmt: skip
        out.append(
            Target(f"W3@10000 {title}: ours / raw tail SELECT ms", (ours, "W3@10000"),
                   (raw, "W3@10000"), "<=", 5.0)
        )  # fmt: skip
        for size in (s for s in sizes if s >= 10_000):
            out.append(
                Target(f"W3 growth {title}: ours @{size:,} / @100", (ours, f"W3@{size}"),
                       (ours, "W3@100"), "<=", 1.5)
            )  # fmt: skip
        out.append(
            Target(f"W4 {title}: ours / raw full SELECT ms", (ours, "W4@10000"),
                   (raw, "W4@10000"), "<=", 2.0)
        )  # fmt: skip
    for peer, backend, w4_comparable in peers:
        ours = OURS["postgres" if backend == "postgres" else "sqlite"]
        if ours not in cells:
            continue
        for w in ("W1", "W2"):
            out.append(Target(f"{w} vs {peer}", (ours, w), (peer, w), ">=", 1, peer))
        reads = [f"W3@{s}" for s in sizes if s <= 10_000]
        for w in reads + (["W4@10000"] if w4_comparable else []):
            out.append(Target(f"{w} vs {peer}", (peer, w), (ours, w), ">=", 1, peer))
    return out


def judge(target: Target, cells: Cells) -> dict[str, Any]:
    ratios = target.ratios(cells)
    out: dict[str, Any] = {
        "label": target.label,
        "peer": target.peer,
        "workload": target.a[1] if target.a[0] != target.peer else target.b[1],
        "op": target.op,
        "threshold": target.threshold,
        "median": None,
        "per_rep": [r for r, _ in ratios],
        "predicted": any(p for _, p in ratios),
        "holds": None,
    }
    if ratios:
        median = statistics.median(out["per_rep"])
        out["median"] = median
        if target.op == ">=":
            out["holds"] = median >= target.threshold
        elif target.op == "<=":
            out["holds"] = median <= target.threshold
    return out


def median_cell(reps: list[Cell]) -> tuple[float | None, bool, str]:
    """(median, any repetition predicted, a note) over the repetitions of one cell."""
    values = [c.best() for c in reps if c.best() is not None]
    notes = [c.note for c in reps if c.note]
    if not values:
        return None, False, notes[0] if notes else ""
    return statistics.median(values), any(c.value is None for c in reps), notes[0] if notes else ""


def _fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def format_cell(reps: list[Cell] | None) -> str:
    if not reps:
        return "—"
    value, predicted, note = median_cell(reps)
    if value is None:
        return "error" if note.startswith("error") else "—"
    if not predicted:
        return _fmt(value)
    unit = reps[0].unit
    if unit == "ms":
        return f"skip (~{value / 1000:,.0f} s pred.)" if value >= 1000 else f"~{_fmt(value)} pred."
    return f"~{_fmt(value)} pred."


def tables(
    cells: Cells,
    order: list[str],
    workloads: list[str],
    judged: list[dict[str, Any]],
    notes: list[str],
) -> str:
    head = ["system"]
    for w in workloads:
        head.append(f"{w} {'msg/s' if w in ('W1', 'W1x4', 'W2') else 'ms'}")
        if w == "W1":
            head.append("W1 cost growth")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for store in order:
        row = [store]
        for w in workloads:
            reps = cells.get(store, {}).get(w)
            row.append(format_cell(reps))
            if w == "W1":
                growth = [c.extra["cost_growth"] for c in reps or [] if "cost_growth" in c.extra]
                row.append(f"{_fmt(statistics.median(growth))}x" if growth else "—")
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", *(f"- {note}" for note in notes)] if notes else []
    lines += ["", "| target | median ratio (per repetition) | required | |", "|---|---|---|---|"]
    for j in (j for j in judged if not j["peer"]):
        if j["median"] is None:
            lines.append(f"| {j['label']} | — | | n/a |")
            continue
        reps = ", ".join(_fmt(r) for r in j["per_rep"])
        pred = " (from a prediction)" if j["predicted"] else ""
        if j["op"] == REFERENCE:
            required = "none: the row above's ceiling"
            mark = "info"
        else:
            required = f"{j['op']} {j['threshold']:g}"
            mark = "PASS" if j["holds"] else "FAIL"
        lines.append(f"| {j['label']} | {_fmt(j['median'])} ({reps}){pred} | {required} | {mark} |")
    peers = list(dict.fromkeys(j["peer"] for j in judged if j["peer"]))
    if peers:
        columns = list(dict.fromkeys(j["workload"] for j in judged if j["peer"]))
        lines += [
            "",
            "session-ledger's speed-up over each peer (same database kind; > 1 = faster; "
            "median of the per-repetition ratios; ~ = from a predicted cell):",
            "",
            "| peer | " + " | ".join(columns) + " |",
            "|---|" + "---|" * len(columns),
        ]
        for peer in peers:
            row = [peer]
            for w in columns:
                j = next((j for j in judged if j["peer"] == peer and j["workload"] == w), None)
                if j is None or j["median"] is None:
                    row.append("—")
                    continue
                mark = "PASS" if j["holds"] else "FAIL"
                row.append(f"{'~' if j['predicted'] else ''}{_fmt(j['median'])}x {mark}")
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def http_table(cells: Cells) -> str:
    """W6: one row per server, operation and concurrency (medians over repetitions)."""
    rows = []
    for store, by_workload in cells.items():
        for workload, reps in by_workload.items():
            if not workload.startswith("W6 ") or not any(c.value for c in reps):
                continue
            _, op, concurrency = workload.split()
            done = [c for c in reps if c.value is not None]
            rate = statistics.median(c.value for c in done if c.value is not None)
            p50 = statistics.median(c.extra["p50_ms"] for c in done)
            p99 = statistics.median(c.extra["p99_ms"] for c in done)
            rows.append(
                f"| {store} | {op} | {concurrency[1:]} | {_fmt(rate)} | {_fmt(p50)} | {_fmt(p99)} |"
            )
    if not rows:
        return ""
    head = [
        "",
        "",
        "W6 HTTP (`session-ledger serve`, one worker; put = one message, get = the "
        "4,000-token window of a 1,000-message session):",
        "",
        "| server | op | concurrency | req/s | p50 ms | p99 ms |",
        "|---|---|---|---|---|---|",
    ]
    return "\n".join(head + rows)


ENCRYPTION_WORKLOADS = ("W1", "W3@100", "W3@1000", "W3@10000", "W4@10000",
                        "W6 put c1", "W6 get c1", "W6 put c16", "W6 get c16")  # fmt: skip


def encryption_table(cells: Cells) -> str:
    """The cost of encryption at rest: each of our stores with a master key over the same
    store without, ratio taken pair by pair within each repetition (median, then each
    repetition's). W1 and W6 are rates (below 1: slower), W3 and W4 times (above 1)."""
    rows = []
    for db in ("sqlite", "postgres"):
        for suffix in ("", " HTTP"):
            clear, sealed = f"{OURS[db]}{suffix}", f"{OURS[db]} encrypted{suffix}"
            if clear not in cells or sealed not in cells:
                continue
            for workload in ENCRYPTION_WORKLOADS:
                pair = Target(workload, (sealed, workload), (clear, workload), REFERENCE, 0)
                ratios = [r for r, predicted in pair.ratios(cells) if not predicted]
                if not ratios:
                    continue
                each = ", ".join(_fmt(r) for r in ratios)
                unit = "rate" if workload.startswith(("W1", "W6")) else "time"
                rows.append(f"| {db}{suffix} | {workload} ({unit}) | "
                            f"{_fmt(statistics.median(ratios))} ({each}) |")  # fmt: skip
    if not rows:
        return ""
    head = ["", "", "Encryption at rest: encrypted / clear, the same store and workload, pair by "
            "pair within each repetition (median (each repetition)):", "",
            "| store | workload | encrypted / clear |", "|---|---|---|"]  # fmt: skip
    return "\n".join(head + rows)
