"""The workflow's side: config checks, the bench job, the sweep, capacity, verdicts,
provenance, resource sampling."""
