#!/usr/bin/env python3
"""KV usage and preemptions over time from `bench serve --kv-trace` CSVs, as an SVG (no plotting
library needed). Usage: plot_kv_trace.py OUT.svg TITLE LABEL=trace.csv [LABEL=trace.csv ...]"""
import csv
import sys

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]


def load(path):
    t, kv, pre = [], [], []
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["server"] not in ("0", ""):
                continue
            t.append(float(row["t_s"]))
            kv.append(float(row["kv_usage"] or 0))
            pre.append(float(row["preemptions_total"] or 0))
    return t, kv, pre


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    out, title, series = sys.argv[1], sys.argv[2], [a.split("=", 1) for a in sys.argv[3:]]
    data = [(label, *load(path)) for label, path in series]
    t_max = max(max(d[1]) for d in data)
    p_max = max(max(d[3]) for d in data) or 1
    W, H, L, R, T, G = 900, 520, 70, 20, 40, 40  # size, margins, gap between the panels
    ph = (H - T - 50 - G) / 2
    def x(t):
        return L + (W - L - R) * t / t_max
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="14">{title}</text>']
    for panel, (name, top, vmax, fmt) in enumerate([("KV usage", T, 1.0, "{:.0%}"), ("preemptions (cumulative)", T + ph + G, p_max, "{:.0f}")]):
        bottom = top + ph
        svg.append(f'<rect x="{L}" y="{top}" width="{W - L - R}" height="{ph}" fill="none" stroke="#888"/>')
        svg.append(f'<text x="14" y="{top + ph / 2}" transform="rotate(-90 14 {top + ph / 2})" text-anchor="middle">{name}</text>')
        for k in range(5):
            v = vmax * k / 4
            y = bottom - ph * k / 4
            svg.append(f'<line x1="{L}" x2="{W - R}" y1="{y}" y2="{y}" stroke="#eee"/>')
            svg.append(f'<text x="{L - 6}" y="{y + 4}" text-anchor="end">{fmt.format(v)}</text>')
        for i, (label, t, kv, pre) in enumerate(data):
            vals = kv if panel == 0 else pre
            pts = " ".join(f"{x(a):.1f},{bottom - ph * min(b / vmax, 1):.1f}" for a, b in zip(t, vals))
            svg.append(f'<polyline fill="none" stroke="{COLORS[i % 4]}" stroke-width="1.2" points="{pts}"/>')
    for k in range(7):
        tt = t_max * k / 6
        svg.append(f'<text x="{x(tt)}" y="{H - 30}" text-anchor="middle">{tt:.0f} s</text>')
    for i, (label, *_) in enumerate(data):
        svg.append(f'<rect x="{L + 10 + 160 * i}" y="{H - 18}" width="14" height="4" fill="{COLORS[i % 4]}"/>')
        svg.append(f'<text x="{L + 30 + 160 * i}" y="{H - 12}">{label}</text>')
    svg.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
