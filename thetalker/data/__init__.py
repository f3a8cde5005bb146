"""On-disk formats: records, prompts, WAV, YAML, and the result folders' layout."""

__all__: list[str] = []  # a map only: import the modules by name
