"""The HTTP/1.1 protocol `serve` runs: uvicorn's (httptools), with the request head bounded.

httptools takes a request line and headers of any length, gathering a long one on the
event loop as it arrives: one client sending a 100 MiB header held every other request
for a second, 300 MiB for 25 s, before any of the app's code ran. Here a connection whose
request head grows past `MAX_HEAD_BYTES` is answered `431 Request Header Fields Too
Large` and closed, as h11 (uvicorn's other protocol) answers past its own limit. The
bytes are counted as they arrive, before the parser sees them; a read that holds the
end of a head may hold the start of its body too, so the bound is well above any read
(asyncio's are at most 256 KiB) and far above any head a client of the API sends.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEAD_BYTES = 1024 * 1024
_SAID = b"The request line and headers are over %d bytes." % MAX_HEAD_BYTES
_ANSWER = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(_SAID), _SAID)
)


class BoundedHeadProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, refusing a request head over MAX_HEAD_BYTES."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.head_bytes: int | None = 0  # of the head being received; None: in a body

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return  # (refused: nothing more is parsed)
        if self.head_bytes is not None:
            self.head_bytes += len(data)
            if self.head_bytes > MAX_HEAD_BYTES:
                self.logger.warning("A request head over %d bytes: refused.", MAX_HEAD_BYTES)
                self.transport.write(_ANSWER)
                self.transport.close()
                return
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self.head_bytes = None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.head_bytes = 0  # the next request's head (a pipelined or kept-alive one)
