"""Small helpers with no project knowledge: redaction, file limits, sentence splitting."""

__all__: list[str] = []  # a map only: import the modules by name
