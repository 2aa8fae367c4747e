"""Medians, ratios taken pair by pair within each repetition, the targets, the tables."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from .workloads import Cell

# Cells indexed as cells[store][workload] -> one Cell per repetition.
Cells = dict[str, dict[str, list[Cell]]]

OURS = {"sqlite": "session-ledger sqlite", "postgres": "session-ledger postgres"}
RAW = {"sqlite": "raw sqlite3 WAL+FULL", "postgres": "raw psycopg INSERT+COMMIT"}


@dataclass(frozen=True)
class Target:
    """ratio = a / b per repetition; it holds when the median meets `op threshold`."""

    label: str
    a: tuple[str, str]  # (store, workload)
    b: tuple[str, str]
    op: str  # ">=" or "<="
    threshold: float

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


def targets(cells: Cells, peers: list[tuple[str, str]], sizes: list[int]) -> list[Target]:
    """The issue's targets, for the stores present in this run. peers: (name, backend)."""
    out: list[Target] = []
    for db, title in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        ours, raw = OURS[db], RAW[db]
        if ours not in cells:
            continue
        limit = 0.5 if db == "sqlite" else 0.4
        out.append(Target(f"W1 {title}: ours / raw", (ours, "W1"), (raw, "W1"), ">=", limit))
        if db == "postgres":
            out.append(
                Target(
                    "W1x4 PostgreSQL: ours / raw 4 conns", (ours, "W1x4"), (raw, "W1x4"), ">=", 0.5
                )
            )
        out.append(
            Target(
                f"W3@10000 {title}: ours / raw tail SELECT",
                (ours, "W3@10000"),
                (raw, "W3@10000"),
                "<=",
                5.0,
            )
        )
        for size in (s for s in sizes if s > 100):
            if size >= 10_000:
                out.append(
                    Target(
                        f"W3 growth {title}: ours @{size:,} / @100",
                        (ours, f"W3@{size}"),
                        (ours, "W3@100"),
                        "<=",
                        1.5,
                    )
                )
        out.append(
            Target(
                f"W4 {title}: ours / raw full SELECT",
                (ours, "W4@10000"),
                (raw, "W4@10000"),
                "<=",
                2.0,
            )
        )
    for peer, backend in peers:
        ours = OURS["postgres" if backend == "postgres" else "sqlite"]
        if ours not in cells:
            continue
        for w in ("W1", "W2"):
            out.append(Target(f"{w} vs {peer}: ours / peer msg/s", (ours, w), (peer, w), ">=", 1))
        for w in [f"W3@{s}" for s in sizes if s <= 10_000] + ["W4@10000"]:
            out.append(Target(f"{w} vs {peer}: peer ms / ours ms", (peer, w), (ours, w), ">=", 1))
    return out


def judge(target: Target, cells: Cells) -> dict[str, Any]:
    ratios = target.ratios(cells)
    if not ratios:
        return {"label": target.label, "median": None, "holds": None, "per_rep": []}
    median = statistics.median(r for r, _ in ratios)
    holds = median >= target.threshold if target.op == ">=" else median <= target.threshold
    return {
        "label": target.label,
        "op": target.op,
        "threshold": target.threshold,
        "median": median,
        "per_rep": [r for r, _ in ratios],
        "predicted": any(p for _, p in ratios),
        "holds": holds,
    }


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
                row.append(f"{statistics.median(growth):.1f}x" if growth else "—")
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", *(f"- {note}" for note in notes)] if notes else []
    lines += ["", "| target | median ratio (per repetition) | required | |", "|---|---|---|---|"]
    for j in judged:
        if j["median"] is None:
            lines.append(f"| {j['label']} | — | | n/a |")
            continue
        reps = ", ".join(_fmt(r) for r in j["per_rep"])
        mark = "PASS" if j["holds"] else "FAIL"
        pred = " (from a prediction)" if j["predicted"] else ""
        lines.append(
            f"| {j['label']} | {_fmt(j['median'])} ({reps}){pred} | {j['op']} {j['threshold']:g}"
            f" | {mark} |"
        )
    return "\n".join(lines)
