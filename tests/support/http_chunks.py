"""Reading a streamed body the way the client counts it: one piece per HTTP chunk."""

from __future__ import annotations

import aiohttp

__all__ = ["read_server_chunks"]


async def read_server_chunks(resp: aiohttp.ClientResponse) -> list[bytes]:
    """The body split where the server's HTTP chunks end (as the client must count them)."""
    chunks, current = [], b""
    async for data, end_of_chunk in resp.content.iter_chunks():
        current += data
        if end_of_chunk and current:
            chunks.append(current)
            current = b""
    if current:
        chunks.append(current)
    return chunks
