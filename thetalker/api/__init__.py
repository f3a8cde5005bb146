"""The speech API as both sides speak it: routes, fields, limits, error bodies, auth."""
