"""The embedded default server: the Piper voice en_US-joe-medium behind vllm-omni's speech API.

`make_app(engine)` builds the aiohttp application (`app.py`); `PiperEngine` is the pool of
onnxruntime sessions and `FakeEngine` a stand-in with set timings (`engine.py`);
`python -m thetalker.server` / `thetalker-serve-local` runs it (`__main__.py`).
piper-tts is GPL-3.0-or-later; it is imported only when the Piper engine starts.
"""

from thetalker.server.app import SERVED_MODEL_NAME, SPEAKER, make_app
from thetalker.server.engine import EngineSettings, FakeEngine, PiperEngine, SynthesisSettings

__all__ = [
    "SERVED_MODEL_NAME",
    "SPEAKER",
    "make_app",
    "EngineSettings",
    "FakeEngine",
    "PiperEngine",
    "SynthesisSettings",
]
