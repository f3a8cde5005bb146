"""Uploaded voices: validation and storage under one folder, as vllm-omni keeps them.

Each voice is two files in the folder: its sample (`<key>.wav` or `<key>.json` for a speaker
embedding) and `<key>.meta.json` with what the API returns. `<key>` is the name case-folded,
so names match case-insensitively and a re-upload overwrites. Every voice already in the
folder is loaded at start, whatever wrote it. Text fields are bounded (`MAX_TEXT_FIELD_CHARS`)
and so is the folder (`MAX_TOTAL_BYTES`), so unauthenticated uploads cannot fill memory or disk.

The folder is the server's alone: a voice's files are named from its key, never from a path
stored in a file (a foreign `<x>.meta.json` naming `../../somewhere` deletes nothing but its
own key's files), a metadata file counts only under its own key's name, and nothing is read
or written through a symlink (writes go to a fresh temporary file, renamed over the target).
"""

from __future__ import annotations

import json
import mimetypes
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thetalker.server.formats import AudioFormatError, wav_duration_s
from thetalker.util.safe_write import replace_file

__all__ = [
    "MAX_FILE_BYTES",
    "MIN_AUDIO_S",
    "MAX_AUDIO_S",
    "MAX_VOICES",
    "MAX_TEXT_FIELD_CHARS",
    "MAX_TOTAL_BYTES",
    "VoiceError",
    "VoiceStore",
    "validate_voice_name",
    "audio_duration_s",
]

MAX_FILE_BYTES = 10 * 1024 * 1024
MIN_AUDIO_S = 1.0
MAX_AUDIO_S = 30.0
MAX_VOICES = 1000
# Not in the contract; keeps `<key>.meta.json` within every filesystem's 255-byte name limit.
MAX_NAME_CHARS = 128
# Not in the contract either (issue 16: 1,000 voices with 9 MiB texts pinned 18 GB): a form's
# text fields (ref_text, speaker_description, consent, speaker_embedding) and the whole folder.
MAX_TEXT_FIELD_CHARS = 16_384
MAX_TOTAL_BYTES = 1024 * 1024 * 1024
_SUFFIX = re.compile(r"\.[a-z0-9]{1,8}")


class VoiceError(ValueError):
    """Bad input for a voice; `param` names the form field, `status` the HTTP status."""

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.param = param
        self.status = status


def validate_voice_name(name: str | None) -> str:
    """The name, stripped; raises VoiceError for the contract's forbidden names."""
    if name is None or not name.strip():
        raise VoiceError("voice name is required", "name")
    name = name.strip()
    if any(c in name for c in "/\\\x00"):
        raise VoiceError("voice name must not contain '/', '\\' or NUL", "name")
    if name in (".", ".."):
        raise VoiceError("voice name must not be '.' or '..'", "name")
    if len(name) > MAX_NAME_CHARS:
        raise VoiceError(f"voice name is longer than {MAX_NAME_CHARS} characters", "name")
    return name


def audio_duration_s(data: bytes) -> float:
    """Seconds of audio in a WAV file, or in any format soundfile reads when it is installed."""
    if data[:4] == b"RIFF":
        return wav_duration_s(data)
    try:
        import io

        import soundfile
    except (ImportError, OSError):
        raise AudioFormatError("audio_sample must be a WAV file") from None
    try:
        info = soundfile.info(io.BytesIO(data))
    except Exception as exc:  # soundfile raises its own error types
        raise AudioFormatError(f"audio_sample is not a readable audio file: {exc}") from None
    return float(info.frames) / float(info.samplerate)


@dataclass
class VoiceStore:
    """The uploaded voices of one server, in `folder`."""

    folder: Path

    def __post_init__(self) -> None:
        self.folder = Path(self.folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._voices: dict[str, dict[str, Any]] = {}
        for meta_path in sorted(self.folder.glob("*.meta.json")):
            try:
                if meta_path.is_symlink():
                    continue  # the folder's own files only
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
                key = str(meta["name"]).casefold()
                if meta_path.name != f"{key}.meta.json":
                    continue  # a file claiming another key's voice is not that voice
                self._voices[key] = meta
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                continue  # a stray or half-written file is not a voice

    def __contains__(self, name: str) -> bool:
        return name.casefold() in self._voices

    def __len__(self) -> int:
        return len(self._voices)

    def names(self) -> list[str]:
        return [v["name"] for v in self._voices.values()]

    def total_bytes(self) -> int:
        return sum(int(v.get("file_size") or 0) for v in self._voices.values())

    def infos(self) -> list[dict[str, Any]]:
        return [self._public(v) for v in self._voices.values()]

    @staticmethod
    def _public(meta: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in meta.items() if not k.startswith("_")}

    def add(
        self,
        name: str | None,
        consent: str | None,
        audio: bytes | None = None,
        filename: str | None = None,
        content_type: str | None = None,
        speaker_embedding: str | None = None,
        ref_text: str | None = None,
        speaker_description: str | None = None,
    ) -> dict[str, Any]:
        """Validate and store one voice; returns its public record."""
        name = validate_voice_name(name)
        if consent is None or not str(consent).strip():
            raise VoiceError("consent is required", "consent")
        if (audio is None) == (speaker_embedding is None):
            raise VoiceError(
                "give exactly one of audio_sample or speaker_embedding", "audio_sample"
            )
        for field_name, text in (
            ("consent", consent),
            ("ref_text", ref_text),
            ("speaker_description", speaker_description),
            ("speaker_embedding", speaker_embedding),
        ):
            if text is not None and len(text) > MAX_TEXT_FIELD_CHARS:
                raise VoiceError(
                    f"{field_name} is longer than {MAX_TEXT_FIELD_CHARS} characters", field_name
                )
        key = name.casefold()
        if key not in self._voices and len(self._voices) >= MAX_VOICES:
            raise VoiceError(f"too many voices (at most {MAX_VOICES})", "name")
        if audio is not None:
            payload, suffix, mime = self._check_audio(audio, filename, content_type)
        else:
            payload, suffix, mime = self._check_embedding(speaker_embedding or "")
        old_meta = self._voices.get(key)
        replaced = int(old_meta.get("file_size") or 0) if old_meta else 0
        if self.total_bytes() - replaced + len(payload) > MAX_TOTAL_BYTES:
            raise VoiceError(
                f"voice storage is full (at most {MAX_TOTAL_BYTES} bytes in all); "
                "delete a voice first",
                "audio_sample",
            )
        # Only this voice's own old sample goes: a glob on the key would also match the files
        # of a voice whose name starts with "<key>.sample." (issue 16).
        old_sample = self._own_sample(key, old_meta)
        if old_sample is not None:
            old_sample.unlink(missing_ok=True)
        sample_path = self.folder / f"{key}.sample{suffix}"
        self._write(sample_path, payload)
        meta: dict[str, Any] = {
            "name": name,
            "consent": str(consent),
            "created_at": int(time.time()),
            "mime_type": mime,
            "file_size": len(payload),
            "embedding_source": "audio" if audio is not None else "upload",
            "embedding_dim": None if audio is not None else len(json.loads(payload)),
            "_file": sample_path.name,
        }
        if ref_text is not None:
            meta["ref_text"] = ref_text
        if speaker_description is not None:
            meta["speaker_description"] = speaker_description
        self._write(self.folder / f"{key}.meta.json", json.dumps(meta).encode())
        self._voices[key] = meta
        return self._public(meta)

    def _own_sample(self, key: str, meta: dict[str, Any] | None) -> Path | None:
        """The voice's sample file: `<key>.sample<.ext>` in the folder, whatever `_file` says
        (a stored name that is not that is not followed)."""
        name = str((meta or {}).get("_file") or "")
        prefix = f"{key}.sample"
        if not name.startswith(prefix) or not _SUFFIX.fullmatch(name[len(prefix) :]):
            return None
        return self.folder / name

    def _write(self, path: Path, data: bytes) -> None:
        """Write `path` (in the folder) through a fresh temporary file renamed over it: a
        symlink planted at either name is replaced or refused, never written through."""
        replace_file(path, data)  # the temporary file in `path`'s folder: the voices folder

    @staticmethod
    def _check_audio(
        audio: bytes, filename: str | None, content_type: str | None
    ) -> tuple[bytes, str, str]:
        if len(audio) > MAX_FILE_BYTES:
            raise VoiceError(
                f"audio_sample is {len(audio)} bytes; at most {MAX_FILE_BYTES} (10 MiB)",
                "audio_sample",
            )
        try:
            duration = audio_duration_s(audio)
        except AudioFormatError as exc:
            raise VoiceError(str(exc), "audio_sample") from None
        if not MIN_AUDIO_S <= duration <= MAX_AUDIO_S:
            raise VoiceError(
                f"audio_sample is {duration:.2f} s long; it must be "
                f"{MIN_AUDIO_S:g} to {MAX_AUDIO_S:g} s",
                "audio_sample",
            )
        is_wav = audio[:4] == b"RIFF"
        suffix = ".wav" if is_wav else Path(filename or "").suffix.lower()
        suffix = suffix if _SUFFIX.fullmatch(suffix) else ".bin"
        guessed = mimetypes.guess_type(f"x{suffix}")[0]
        mime = "audio/wav" if is_wav else (content_type or guessed or "application/octet-stream")
        return audio, suffix, mime

    @staticmethod
    def _check_embedding(text: str) -> tuple[bytes, str, str]:
        try:
            values = json.loads(text)
        except ValueError:
            raise VoiceError("speaker_embedding must be a JSON list", "speaker_embedding") from None
        if (
            not isinstance(values, list)
            or not values
            or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        ):
            raise VoiceError(
                "speaker_embedding must be a non-empty JSON list of numbers", "speaker_embedding"
            )
        return json.dumps(values).encode(), ".json", "application/json"

    def delete(self, name: str) -> dict[str, Any]:
        """Remove a voice; VoiceError with status 404 when there is none of that name."""
        key = name.casefold()
        meta = self._voices.pop(key, None)
        if meta is None:
            raise VoiceError(f"Voice '{name}' not found", None, status=404)
        (self.folder / f"{key}.meta.json").unlink(missing_ok=True)
        sample = self._own_sample(key, meta)
        if sample is not None:
            sample.unlink(missing_ok=True)
        return self._public(meta)
