"""Replace a file whole in a folder others might plant links in, never writing through one.

The data goes to a fresh temporary file in the same folder, under a name nobody can predict,
created `O_EXCL | O_NOFOLLOW` (a link planted there is refused, not followed), then renamed
over the file: a link at the file's own name is replaced, never its target written. A reader
sees the old file or the new one, never half of one. Used for the voices folder
(thetalker.server.voices) and the GPU slots' holder files (thetalker.lifecycle.gpu_slots).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["replace_file"]


def replace_file(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write `data` as `path` through a fresh temporary file renamed over it (module note);
    the temporary file is removed when anything fails."""
    tmp = path.parent / f".{secrets.token_hex(8)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)  # replaces a symlink itself, never its target
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
