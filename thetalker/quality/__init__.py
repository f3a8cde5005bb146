"""Quality: Whisper transcription (ASR) and word error rate."""
