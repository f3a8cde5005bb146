"""Quality: what the listener hears. Whisper transcription (ASR) and word error rate, audio
health of each stream, DNSMOS naturalness, the listening pack of the worst streams."""

__all__: list[str] = []  # a map only: import the modules by name
