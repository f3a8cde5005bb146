"""TheTalker: how open text-to-speech models behave when served.

Streams `POST /v1/audio/speech` from many clients at once, records every chunk's
arrival, and derives RTFx, time to first audio and stream continuity from the
records (`thetalker.metrics`, the one implementation of each figure).
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
