"""Console scripts: parse arguments, call the library, print."""
