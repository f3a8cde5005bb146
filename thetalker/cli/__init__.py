"""Console scripts: parse arguments, call the library, print."""

__all__: list[str] = []  # a map only: import the modules by name
