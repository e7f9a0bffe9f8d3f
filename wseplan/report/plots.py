"""Deterministic PNG plots for reports (matplotlib, Agg canvas, no pyplot state).

Every function takes plain data and returns PNG bytes. Figures have a fixed size and DPI, the default style
reset through ``rc_context`` (a user's matplotlibrc cannot change the output), and PNG metadata stripped, so the
same data gives the same bytes with the pinned matplotlib version (``matplotlib==3.11.2``).

Axis labels always carry units in brackets; every tick is written by :func:`wseplan.report.formats.fmt_tick`.
"""
from __future__ import annotations

import io
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .formats import fmt_num, fmt_tick

FIGSIZE_IN = (7.0, 4.2)
DPI = 110
_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"]
_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "h"]
# claim verdicts read as traffic lights: impossible red, optimistic orange, consistent green
VERDICT_COLORS = {"impossible": "#d62728", "optimistic": "#ff7f0e", "consistent": "#2ca02c"}


@dataclass(frozen=True)
class Series:
    """One labelled line: x and y values (same length), an optional band (low/high) and line style."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    low: Sequence[float] | None = None
    high: Sequence[float] | None = None
    style: str = "-"
    marker: bool = True
    color: str | None = None  # None: the next colour of the palette


@dataclass(frozen=True)
class Marker:
    """A vertical (``axis='x'``) or horizontal (``axis='y'``) reference line with a label."""

    value: float
    label: str
    axis: str = "x"


@dataclass(frozen=True)
class Plot:
    """A whole figure: series, reference lines, axis labels (with units) and scales."""

    title: str
    xlabel: str
    ylabel: str
    series: list[Series] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    logx: bool = False
    logy: bool = False
    ylim_zero: bool = False
    legend_loc: str = "best"
    yticks: list[tuple[float, str]] = field(default_factory=list)  # categorical labels (top to bottom)


def _matplotlib():
    """matplotlib, imported with its logger quiet: a font cache it cannot save (a read-only or full home folder,
    ``ulimit -f``) is logged as a warning on stderr, which would break the one-line error contract; the cache
    only speeds up the next start."""
    log = logging.getLogger("matplotlib")
    old = log.level
    log.setLevel(logging.ERROR)
    try:
        import matplotlib
        import matplotlib.font_manager  # noqa: F401 - builds (and tries to save) the font cache
    finally:
        log.setLevel(old)
    return matplotlib


def _rc() -> dict:
    matplotlib = _matplotlib()

    rc = dict(matplotlib.rcParamsDefault)
    rc.update({
        "backend": "agg",
        "font.family": "DejaVu Sans",
        "font.size": 9.0,
        "axes.titlesize": 10.5,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "legend.fontsize": 8.0,
        "legend.framealpha": 0.9,
        "svg.hashsalt": "wseplan",
        "path.simplify": False,
        "figure.dpi": DPI,
        "savefig.dpi": DPI,
        "axes.formatter.useoffset": False,
    })
    return rc


def render(plot: Plot) -> bytes:
    """Render ``plot`` to PNG bytes (deterministic)."""
    matplotlib = _matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with matplotlib.rc_context(rc=_rc()):
        fig = Figure(figsize=FIGSIZE_IN, dpi=DPI)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot(1, 1, 1)
        for i, s in enumerate(plot.series):
            color = s.color or _COLORS[i % len(_COLORS)]
            xs = [float(v) for v in s.x]
            ys = [float(v) for v in s.y]
            ax.plot(xs, ys, color=color, label=s.label, linewidth=1.6, linestyle=s.style or "none",
                    marker=_MARKERS[i % len(_MARKERS)] if s.marker else None, markersize=4 if s.style else 6)
            if s.low is not None and s.high is not None:
                ax.fill_between(xs, [float(v) for v in s.low], [float(v) for v in s.high], color=color, alpha=0.18,
                                linewidth=0)
        styles = [":", "-.", "--", (0, (5, 1, 1, 1))]
        for j, m in enumerate(plot.markers):
            ls = styles[j % len(styles)]
            if m.axis == "x":
                ax.axvline(m.value, color="#444444", linestyle=ls, linewidth=1.2, label=m.label)
            else:
                ax.axhline(m.value, color="#444444", linestyle=ls, linewidth=1.0, label=m.label)
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

        # a log axis needs a positive value to show (an empty plot, e.g. no Monte Carlo band, stays linear)
        logx = plot.logx and any(float(v) > 0 for s in plot.series for v in s.x)
        logy = plot.logy and any(float(v) > 0 for s in plot.series for v in s.y)
        if logx:
            ax.set_xscale("log")
        if logy:
            ax.set_yscale("log")
        for on, axis, lim in ((logx, ax.xaxis, ax.get_xlim), (logy, ax.yaxis, ax.get_ylim)):
            if on:
                lo, hi = lim()
                subs = (1.0, 2.0, 5.0) if hi / max(lo, 1e-300) < 1e4 else (1.0,)
                axis.set_major_locator(LogLocator(base=10.0, subs=subs))
                axis.set_minor_formatter(NullFormatter())
            axis.set_major_formatter(FuncFormatter(lambda v, _pos=None: fmt_tick(v)))  # one tick format everywhere
        if plot.ylim_zero and not logy:
            ax.set_ylim(bottom=0)
        if plot.yticks:
            ax.set_yticks([v for v, _ in plot.yticks], [t for _, t in plot.yticks])
            ax.set_ylim(max(v for v, _ in plot.yticks) + 0.5, min(v for v, _ in plot.yticks) - 0.5)
        ax.set_title(plot.title)
        ax.set_xlabel(plot.xlabel)
        ax.set_ylabel(plot.ylabel)
        if plot.series or plot.markers:
            ax.legend(loc=plot.legend_loc)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


# --------------------------------------------------------------------------------------------- builders
def roofline_plot(*, targets: Sequence[dict], points: Sequence[dict] = (), predicted: Sequence[dict] = (),
                  title: str = "Roofline") -> Plot:
    """The FLOP/s the model predicts against arithmetic intensity, with each target's roof drawn apart.

    ``targets``: dicts with ``label``, ``peak_flop_per_s`` and ``bandwidth_bytes_per_s`` (the memory that feeds
    the compute: HBM for a GPU, on-wafer SRAM for a wafer); each roof, min(peak, intensity x bandwidth)
    (Williams, Waterman and Patterson, CACM 52(4), 2009), is an upper bound and is drawn dashed.
    ``predicted``: dicts with ``label``, ``intensity_flop_per_byte`` and ``flop_per_s`` (lists): what the model
    predicts, drawn as markers in the colour of the target's roof. ``points``: dicts with ``label`` and
    ``intensity_flop_per_byte`` (a workload's intensity, drawn as a vertical line).
    """
    ridges = [t["peak_flop_per_s"] / t["bandwidth_bytes_per_s"] for t in targets]
    ais = [p["intensity_flop_per_byte"] for p in points] + [x for p in predicted for x in p["intensity_flop_per_byte"]]
    lo = min([0.1] + [a / 3 for a in ais])
    hi = max(ridges + [1.0] + [a * 3 for a in ais]) * 10
    xs = np.unique(np.concatenate([np.geomspace(lo, hi, 60), ridges]))
    series = []
    families = [str(t["label"]).split(" roof")[0] for t in targets]
    colors = {f: _COLORS[i % len(_COLORS)] for i, f in enumerate(dict.fromkeys(families))}
    seen: set[str] = set()
    for t, fam in zip(targets, families):
        ys = np.minimum(t["peak_flop_per_s"], xs * t["bandwidth_bytes_per_s"]) / 1e12
        style = "-." if fam in seen else "--"  # a second roof of the same target (the MemoryX stream)
        seen.add(fam)
        series.append(Series(label=t["label"], x=xs, y=ys, marker=False, style=style, color=colors[fam]))
    for p in predicted:
        fam = str(p["label"]).split(" predicted")[0]
        series.append(Series(label=p["label"], x=list(p["intensity_flop_per_byte"]),
                             y=[v / 1e12 for v in p["flop_per_s"]], style="-", marker=True,
                             color=colors.get(fam)))
    plot = Plot(title=title, xlabel="arithmetic intensity [FLOP/byte]", ylabel="FLOP/s [TFLOP/s]", series=series,
                logx=True, logy=True, legend_loc="lower right")
    for pt in points:
        plot.markers.append(Marker(pt["intensity_flop_per_byte"],
                                   f"{pt['label']}: {fmt_num(pt['intensity_flop_per_byte'], 3)} FLOP/byte"))
    return plot
