"""The speech API as both sides speak it: routes, fields, limits, error bodies, auth."""

__all__: list[str] = []  # a map only: import the modules by name
