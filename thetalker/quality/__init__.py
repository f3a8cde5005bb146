"""Quality: Whisper transcription (ASR) and word error rate."""

__all__: list[str] = []  # a map only: import the modules by name
