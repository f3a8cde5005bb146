"""The server under test's life: start, readiness, stop, leftovers, serving env, deploy files."""

__all__: list[str] = []  # a map only: import the modules by name
