"""Draw W12's cost curves from ``session-sql bench --only W12 --json`` reports.

    session-sql bench --only W12 --json > w12-sqlite.json
    session-sql bench --only W12 --json --url postgresql://postgres@127.0.0.1/test > w12-pg.json
    python scripts/plot_scale.py w12-sqlite.json w12-pg.json -o docs/images/w12-cost-curves.png

One panel per report: each operation's median (milliseconds, log scale) against the events in
the store (log scale). A flat line is an operation whose cost does not grow with the store.
Also prints the Markdown table docs/performance.md holds (p50 / p99 at each size, and growth).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt
from matplotlib import ticker


def _scale_rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        w["name"].removeprefix("W12 "): w["extra"]
        for w in report["workloads"]
        if w["name"].startswith("W12 ") and "p50_ms" in w["extra"]
    }


def _events(n: int) -> str:
    return f"{n / 1e6:g}M" if n >= 1_000_000 else f"{n / 1e3:g}k"


def table(report: dict[str, Any]) -> str:
    """p50 / p99 (ms) of each operation at each size, and the growth of its p50."""
    rows = _scale_rows(report)
    sizes = next(iter(rows.values()))["events"]
    head = "| operation | " + " | ".join(_events(n) for n in sizes) + " | growth |"
    lines = [head, "|---|" + "---:|" * (len(sizes) + 1)]
    for op, extra in rows.items():
        cells = [
            f"{p50:.2f} / {p99:.2f}"
            for p50, p99 in zip(extra["p50_ms"], extra["p99_ms"], strict=True)
        ]
        lines.append(f"| {op} | " + " | ".join(cells) + f" | {extra['growth']:.2f}× |")
    storage = [w for w in report["workloads"] if w["name"] == "W12 bytes per event"]
    if storage:
        cells = [f"{b:.0f} B" for b in storage[0]["extra"]["bytes_per_event"]]
        lines.append("| bytes per event | " + " | ".join(cells) + " | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()
    reports = [json.loads(path.read_text(encoding="utf-8")) for path in args.reports]
    fig, axes = plt.subplots(1, len(reports), figsize=(6 * len(reports), 4.5), squeeze=False)
    for ax, report in zip(axes[0], reports, strict=True):
        for op, extra in _scale_rows(report).items():
            ax.plot(extra["events"], extra["p50_ms"], marker="o", label=op)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_xlabel("events in the store")
        ax.set_ylabel("median, ms")
        ax.set_title(f"W12 on {'SQLite' if report['backend'] == 'sqlite' else 'PostgreSQL'}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.tight_layout()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.output, dpi=110)
    for report in reports:
        print(f"\n{report['backend']}:\n\n{table(report)}")


if __name__ == "__main__":
    main()
