"""On-disk formats: records, prompts, WAV, YAML, and the result folders' layout."""
