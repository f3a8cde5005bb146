"""The workflow's side: config checks, the bench job, the sweep, capacity, verdicts,
provenance, resource sampling."""

__all__: list[str] = []  # a map only: import the modules by name
