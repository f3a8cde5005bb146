"""Everything after the runs: `points` (results/points.csv from records.jsonl alone),
`tables` (Markdown) and `figures` (matplotlib, PNG). Tables and figures read points.csv
and compute nothing new beyond `thetalker.metrics.point_cost`."""

__all__ = ["points", "tables", "figures"]
