"""The charts of docs/benchmarks.md: `make bench`'s main figures drawn as SVG
(plain text, no plotting library) into docs/bench/: throughput and its ratio
to "no filter" per case, latency percentiles, decisions per store message.

`scripts/bench/report.py` calls `chart_section(results)` with the run's
figures. Run alone, this script draws them from the main table of the
committed docs/benchmarks.md (the figures of its last run) and puts the
section back in place:

    python3 scripts/bench charts              # docs/bench/*.svg and the section
    python3 scripts/bench charts --check DIR  # draws into DIR and parses each as XML
"""

import re
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from xml.sax.saxutils import escape

from .common import ROOT

REPORT = ROOT / "docs/benchmarks.md"
CHARTS = ROOT / "docs/bench"
HEADING = "## Charts"
COLORS = {16: "#4e79a7", 64: "#f28e2b"}
PERCENTILE_COLORS = {("p50", 0): "#59a14f", ("p99", 0): "#e15759", ("p50", 1): "#76b7b2", ("p99", 1): "#b07aa1"}
WIDTH, LEFT, RIGHT, BAR, GAP = 860, 250, 90, 11, 10


def hbar_chart(title, unit, categories, series, reference=None, fmt=lambda v: f"{v:,.0f}"):
    """Horizontal grouped bars: one group per category, one bar per series
    `(label, color, values)` (a value None draws no bar), each labelled
    with `fmt(value)`; `reference` draws a dashed line at that value."""
    top = 56
    group = len(series) * BAR + GAP
    height = top + len(categories) * group + 40
    peak = max([v for _, _, values in series for v in values if v is not None] + [reference or 0]) or 1
    scale = (WIDTH - LEFT - RIGHT) / peak
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">',
           f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
           f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-size="14" font-weight="bold">{escape(title)}</text>']
    x = 16
    for label, color, _ in series:
        out.append(f'<rect x="{x}" y="30" width="10" height="10" fill="{color}"/>')
        out.append(f'<text x="{x + 14}" y="39">{escape(label)}</text>')
        x += 24 + 7 * len(label)
    for i, name in enumerate(categories):
        y0 = top + i * group
        out.append(f'<text x="{LEFT - 6}" y="{y0 + len(series) * BAR / 2 + 4}" text-anchor="end">{escape(name)}</text>')
        for j, (_, color, values) in enumerate(series):
            value = values[i]
            if value is None:
                continue
            y = y0 + j * BAR
            w = max(value * scale, 0.5)
            out.append(f'<rect x="{LEFT}" y="{y}" width="{w:.1f}" height="{BAR - 1}" fill="{color}"/>')
            out.append(f'<text x="{LEFT + w + 4:.1f}" y="{y + BAR - 2}">{escape(fmt(value))}</text>')
    axis = top + len(categories) * group
    out.append(f'<line x1="{LEFT}" y1="{top - 4}" x2="{LEFT}" y2="{axis}" stroke="#333"/>')
    if reference is not None:
        rx = LEFT + reference * scale
        out.append(f'<line x1="{rx:.1f}" y1="{top - 4}" x2="{rx:.1f}" y2="{axis}" stroke="#333" stroke-dasharray="4 3"/>')
        out.append(f'<text x="{rx:.1f}" y="{axis + 14}" text-anchor="middle">{escape(fmt(reference))}</text>')
    out.append(f'<text x="{LEFT + (WIDTH - LEFT - RIGHT) / 2}" y="{height - 8}" text-anchor="middle">{escape(unit)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def charts(results):
    """`{file name: svg text}` from `results` (`{case: [row per connections]}`,
    rows with `connections`, `rps`, `p50`, `p99`, `per_call`)."""
    names = list(results)
    # 16 and 64 connections: the 1-connection rows are the table's latency
    # of a lone request, not drawn.
    conns = sorted({r["connections"] for rows in results.values() for r in rows} & set(COLORS))
    at = lambda name, c: next((r for r in results[name] if r["connections"] == c), None)
    base = {c: at("no filter", c)["rps"] for c in conns}
    pick = lambda name, c, key: (at(name, c) or {}).get(key)
    out = {
        "throughput.svg": hbar_chart(
            "Throughput per case", "requests per second (wrk)", names,
            [(f"{c} connections", COLORS.get(c, "#999"), [pick(n, c, "rps") for n in names]) for c in conns]),
        "ratio.svg": hbar_chart(
            'Throughput as a ratio to "no filter" (same run)', "× no filter (dashed: 1.0)", names,
            [(f"{c} connections", COLORS.get(c, "#999"),
              [None if pick(n, c, "rps") is None else pick(n, c, "rps") / base[c] for n in names]) for c in conns],
            reference=1.0, fmt=lambda v: f"{v:.2f}"),
        "latency.svg": hbar_chart(
            "Latency percentiles per case", "milliseconds (wrk)", names,
            [(f"{p} at {c} connections", PERCENTILE_COLORS.get((p, i), "#999"), [pick(n, c, p) for n in names])
             for i, c in enumerate(conns) for p in ("p50", "p99")],
            fmt=lambda v: f"{v:.2f}"),
    }
    stored = [n for n in names if any(r.get("per_call") for r in results[n])]
    if stored:
        out["decisions.svg"] = hbar_chart(
            "Decisions per message on the store stream", "decisions per message (store.requests / store.messages)",
            stored, [(f"{c} connections", COLORS.get(c, "#999"), [pick(n, c, "per_call") for n in stored])
                     for c in conns], fmt=lambda v: f"{v:.1f}")
    return out


def write_charts(results, directory):
    directory.mkdir(parents=True, exist_ok=True)
    made = charts(results)
    for name, svg in made.items():
        (directory / name).write_text(svg)
    return list(made)


def chart_section(results, directory=CHARTS):
    """Writes the charts and returns the report's lines that show them."""
    files = write_charts(results, directory)
    lines = ["", HEADING, "", "The table above, drawn (`scripts/bench/charts.py`).", ""]
    titles = {"throughput.svg": "Throughput per case", "ratio.svg": "Throughput as a ratio to no filter",
              "latency.svg": "Latency percentiles per case", "decisions.svg": "Decisions per store message"}
    for name in files:
        lines += [f"![{titles[name]}](bench/{name})", ""]
    return lines[:-1]


def results_from_report(text):
    """The main table of a docs/benchmarks.md, as `results`."""
    results = {}
    header = "| case | conns | req/s | p50 ms | p99 ms |"
    rows = text.split(header, 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        per_call = re.match(r"^[0-9.]+$", cells[6])
        results.setdefault(cells[0], []).append({
            "connections": int(cells[1]), "rps": float(cells[2]), "p50": float(cells[3]), "p99": float(cells[4]),
            "per_call": float(cells[6]) if per_call else None})
    return results


def main(argv):
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return
    text = REPORT.read_text()
    results = results_from_report(text)
    if argv[:1] == ["--check"]:
        for name in write_charts(results, Path(argv[1])):
            root = ElementTree.parse(Path(argv[1]) / name).getroot()
            assert root.tag == "{http://www.w3.org/2000/svg}svg", f"{name}: {root.tag}"
            print(name)
        return
    section = "\n".join(chart_section(results))
    head, rest = text.split("\n## Where the time goes", 1)
    head = head.split("\n" + HEADING, 1)[0].rstrip("\n")
    REPORT.write_text(head + "\n" + section + "\n\n## Where the time goes" + rest)
    print(f"wrote {CHARTS}/*.svg and the charts of {REPORT}")


if __name__ == "__main__":
    main(sys.argv[1:])
