"""Server-rendered SVG line charts: coordinates computed here, drawn by the template."""

from __future__ import annotations

from dataclasses import dataclass

WIDTH, HEIGHT, PAD = 560, 180, 28


@dataclass(frozen=True)
class Series:
    label: str
    css: str
    points: str  # "x,y x,y ..." for <polyline>
    dots: list[tuple[float, float]]  # markers, so a single bucket still shows
    last: float


@dataclass(frozen=True)
class Chart:
    title: str
    series: list[Series]
    peak: float
    x_first: str
    x_last: str
    width: int = WIDTH
    height: int = HEIGHT
    pad: int = PAD


def line_chart(title: str, labels: list[str], values: dict[str, list[float]]) -> Chart:
    """One line per series over shared x labels (time buckets)."""
    peak = max([v for series in values.values() for v in series] + [0.0])
    y_max = peak or 1.0
    span = max(len(labels) - 1, 1)
    plotted = []
    for index, (label, series) in enumerate(values.items()):
        dots = [
            (
                round(PAD + i * (WIDTH - 2 * PAD) / span, 1),
                round(HEIGHT - PAD - value / y_max * (HEIGHT - 2 * PAD), 1),
            )
            for i, value in enumerate(series)
        ]
        coords = " ".join(f"{x},{y}" for x, y in dots)
        plotted.append(Series(label, f"s{index % 4}", coords, dots, series[-1] if series else 0.0))
    return Chart(title, plotted, peak, labels[0] if labels else "", labels[-1] if labels else "")
