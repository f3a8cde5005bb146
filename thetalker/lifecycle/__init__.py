"""The server under test's life: start, readiness, stop, leftovers, serving env, deploy files."""
