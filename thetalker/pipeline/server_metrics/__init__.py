"""The server's own metrics per point: parsed (families), scraped (scrape)."""

from thetalker.pipeline.server_metrics.families import (
    PREFIXES,
    Quantile,
    Snapshot,
    counter_deltas,
    histogram_deltas,
    histogram_quantile,
    merge_histograms,
    parse_metrics,
)
from thetalker.pipeline.server_metrics.scrape import (
    FILE_NAME,
    PointScrape,
    ScrapeError,
    scrape,
    unavailable,
)

__all__ = [
    "PREFIXES",
    "Quantile",
    "Snapshot",
    "counter_deltas",
    "histogram_deltas",
    "histogram_quantile",
    "merge_histograms",
    "parse_metrics",
    "FILE_NAME",
    "PointScrape",
    "ScrapeError",
    "scrape",
    "unavailable",
]
