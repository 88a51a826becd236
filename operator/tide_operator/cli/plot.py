"""`tide plot`: the timeline as a PNG (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tide_operator.cli.timeline import PROMOTION, Series, Timeline

MARKER_STYLE = {PROMOTION: ("tab:green", "promoted"), "rollback": ("tab:red", "rolled back")}


def _times(series: Series) -> list[datetime]:
    return [datetime.fromtimestamp(t, UTC) for t, _ in series.points]


def _values(series: Series) -> list[float]:
    return [v for _, v in series.points]


def _no_data(axis: Any) -> None:
    axis.text(0.5, 0.5, "no data in this window", transform=axis.transAxes, ha="center", va="center",
              color="0.5", fontsize=11)


def _acceptance(axis: Any, timeline: Timeline) -> None:
    for series in timeline.acceptance_length:
        axis.plot(_times(series), _values(series), linewidth=1.8, label=series.label)
    axis.axhline(1.0, color="0.6", linestyle=":", linewidth=1)  # 1 token/step = the draft adds nothing
    axis.set_ylabel("acceptance length\n(tokens / step)")
    axis.set_ylim(bottom=0.9)
    if not timeline.acceptance_length:
        _no_data(axis)


def _speculation(axis: Any, timeline: Timeline) -> None:
    for series in timeline.speculation:
        axis.fill_between(_times(series), _values(series), step="post", alpha=0.35, color="tab:blue")
        axis.step(_times(series), _values(series), where="post", color="tab:blue", linewidth=1.5)
    axis.set_ylim(-0.1, 1.1)
    axis.set_yticks([0, 1], ["off", "on"])
    axis.set_ylabel("speculation")
    if not timeline.speculation:
        _no_data(axis)


def _batch_size(axis: Any, timeline: Timeline) -> None:
    for series in timeline.batch_size:
        axis.plot(_times(series), _values(series), color="tab:purple", linewidth=1.5, label=series.label)
    axis.set_ylabel("batch size\n(running requests\nper engine)")
    axis.set_ylim(bottom=0)
    if not timeline.batch_size:
        _no_data(axis)


def _off_spans(timeline: Timeline) -> list[tuple[float, float]]:
    """Intervals where speculation was reported off (acceptance has no data there, by design)."""
    spans: list[tuple[float, float]] = []
    for series in timeline.speculation:
        points = series.points
        for (t, value), (t_next, _) in zip(points, (*points[1:], (timeline.end, 0.0)), strict=True):
            if value < 0.5:
                spans.append((t, t_next))
    return spans


def _shade_off(axis: Any, timeline: Timeline) -> None:
    for first, (start, end) in enumerate(_off_spans(timeline)):
        axis.axvspan(datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC), color="0.85",
                     alpha=0.6, linewidth=0, label=None if first else "speculation off")


def _markers(axes: list[Any], timeline: Timeline) -> None:
    for marker in timeline.markers:
        color, verb = MARKER_STYLE[marker.kind]
        moment = datetime.fromtimestamp(marker.time, UTC)
        for axis in axes:
            axis.axvline(moment, color=color, linestyle="--", linewidth=1.4)
        axes[0].annotate(f"{verb}: {marker.text}", xy=(moment, 1.0), xycoords=("data", "axes fraction"),
                         xytext=(3, -3), textcoords="offset points", rotation=90, va="top", ha="left",
                         color=color, fontsize=8, bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none",
                                                        "alpha": 0.8})


def plot_timeline(timeline: Timeline, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(3, 1, sharex=True, figsize=(11, 7.5), height_ratios=[3, 1.2, 2],
                                layout="constrained")
    _acceptance(axes[0], timeline)
    _shade_off(axes[0], timeline)
    _speculation(axes[1], timeline)
    _batch_size(axes[2], timeline)
    _markers(list(axes), timeline)
    start, end = (datetime.fromtimestamp(t, UTC) for t in (timeline.start, timeline.end))
    axes[2].set_xlim(start, end)
    axes[2].xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))  # type: ignore[no-untyped-call]
    axes[2].set_xlabel("time (UTC)")
    for axis in axes:
        axis.grid(alpha=0.3)
    if timeline.acceptance_length or timeline.speculation:
        axes[0].legend(loc="upper left", fontsize=9)
    figure.suptitle(f"{timeline.title}: {start:%Y-%m-%d %H:%M} to {end:%H:%M} UTC", fontsize=12)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return out
