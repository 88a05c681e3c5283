"""sweep_svg.py -- the pictures of tools/sweep's report: eval loss against syncs
with the front, and H per round (SVG, no dependencies)."""
import math


def svg_front(path, scenario, pts, env):
    """Eval loss against syncs (log): every configuration's mean ± std (pts:
    summaries with tag, syncs, loss, loss_std) and the front (env)."""
    W, Ht, pad = 640, 400, 60
    if not pts:
        return False
    xs = [math.log10(p["syncs"]) for p in pts]
    ys = [p["loss"] + d * p["loss_std"] for p in pts for d in (-1, 1)]
    x0, x1 = min(xs) - 0.1, max(xs) + 0.1
    y0, y1 = min(ys) - 0.005, max(ys) + 0.005

    def X(s):
        return pad + (math.log10(s) - x0) / (x1 - x0) * (W - 2 * pad)

    def Y(v):
        return Ht - pad - (v - y0) / (y1 - y0) * (Ht - 2 * pad)

    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{Ht}" '
         'font-family="sans-serif" font-size="11">', f'<rect width="{W}" height="{Ht}" fill="white"/>',
         f'<text x="{W/2}" y="20" text-anchor="middle" font-size="13">scenario {scenario}</text>',
         f'<line x1="{pad}" y1="{Ht-pad}" x2="{W-pad}" y2="{Ht-pad}" stroke="black"/>',
         f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{Ht-pad}" stroke="black"/>',
         f'<text x="{W/2}" y="{Ht-15}" text-anchor="middle">syncs (log scale)</text>',
         f'<text x="15" y="{Ht/2}" transform="rotate(-90 15 {Ht/2})" text-anchor="middle">'
         'final eval loss (mean ± std, report seeds)</text>']
    for e in range(0, 5):
        for m in (1, 2, 5):
            v = m * 10 ** e
            if x0 <= math.log10(v) <= x1:
                o.append(f'<line x1="{X(v):.1f}" y1="{Ht-pad}" x2="{X(v):.1f}" y2="{Ht-pad+4}" '
                         'stroke="black"/><text x="{:.1f}" y="{}" text-anchor="middle">{}</text>'
                         .format(X(v), Ht - pad + 16, v))
    step = 0.05 if y1 - y0 > 0.2 else 0.01
    v = math.ceil(y0 / step) * step
    while v <= y1:
        o.append(f'<line x1="{pad-4}" y1="{Y(v):.1f}" x2="{pad}" y2="{Y(v):.1f}" stroke="black"/>'
                 f'<text x="{pad-6}" y="{Y(v)+4:.1f}" text-anchor="end">{v:.2f}</text>')
        v += step
    o.append('<polyline fill="none" stroke="#888" stroke-dasharray="4 3" points="' +
             " ".join(f"{X(s):.1f},{Y(l):.1f}" for s, l in env) + '"/>')
    colors = {"autoloco": "#d62728", "adacomm": "#1f77b4", "qsr": "#2ca02c"}
    for p in pts:
        c = colors.get(p["tag"], "#8c564b" if p["tag"].startswith("fixedc") else "#555")
        x, y, s = X(p["syncs"]), Y(p["loss"]), p["loss_std"]
        o.append(f'<line x1="{x:.1f}" y1="{Y(p["loss"]-s):.1f}" x2="{x:.1f}" '
                 f'y2="{Y(p["loss"]+s):.1f}" stroke="{c}"/>'
                 f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{c}"/>'
                 f'<text x="{x+6:.1f}" y="{y-6:.1f}" fill="{c}">{p["tag"]}</text>')
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")
    return True


def svg_traces(path, lines, seed, tag="autoloco"):
    """H against the inner step, one line per scenario (lines: scenario -> the H
    history of seed `seed`)."""
    W, Ht, pad = 640, 320, 60
    if not lines:
        return False
    steps = max(sum(h) for h in lines.values())
    hmax = max(max(h) for h in lines.values()) * 1.1

    def X(s):
        return pad + s / steps * (W - 2 * pad)

    def Y(h):
        return Ht - pad - h / hmax * (Ht - 2 * pad)

    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{Ht}" '
         'font-family="sans-serif" font-size="11">', f'<rect width="{W}" height="{Ht}" fill="white"/>',
         f'<text x="{W/2}" y="20" text-anchor="middle" font-size="13">{tag}: H per round '
         f'(seed {seed})</text>',
         f'<line x1="{pad}" y1="{Ht-pad}" x2="{W-pad}" y2="{Ht-pad}" stroke="black"/>',
         f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{Ht-pad}" stroke="black"/>',
         f'<text x="{W/2}" y="{Ht-15}" text-anchor="middle">inner step</text>',
         f'<text x="15" y="{Ht/2}" transform="rotate(-90 15 {Ht/2})" text-anchor="middle">H</text>']
    for k in range(0, int(steps) + 1, 500):
        o.append(f'<text x="{X(k):.1f}" y="{Ht-pad+16}" text-anchor="middle">{k}</text>')
    for v in range(0, int(hmax) + 1, 100 if hmax > 300 else 50):
        o.append(f'<text x="{pad-6}" y="{Y(v)+4:.1f}" text-anchor="end">{v}</text>')
    colors = {"iid": "#1f77b4", "noniid": "#d62728", "shift": "#2ca02c", "languages": "#9467bd"}
    for i, (sc, hs) in enumerate(lines.items()):
        pts, s = [], 0
        for h in hs:  # a step function: H held over its interval
            pts += [(s, h), (s + h, h)]
            s += h
        o.append(f'<polyline fill="none" stroke="{colors[sc]}" stroke-width="2" points="' +
                 " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in pts) + '"/>')
        o.append(f'<text x="{W-pad-70}" y="{pad+14*i}" fill="{colors[sc]}">{sc}</text>')
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")
    return True
