"""Which API key a saved adapter used, without the key: its fingerprint, and the keys this
process was given, by fingerprint.

A saved adapter (`to_dict`, `to_string`, a workflow's `Context`) records the first 16 hex
digits of its key's sha256 (the start of the digest the server's key table stores),
never the key, as LlamaIndex's own stores keep their credentials out of what they save.
Restored in the process that made it, the adapter finds its key again here; in another
process, the key comes from `api_key=` or LEDGER_API_KEY, which must be the same key.
"""

from __future__ import annotations

import hashlib
import os
import threading

from session_ledger.domain.errors import InvalidInput

API_KEY_ENV = "LEDGER_API_KEY"  # the remote API key, when none is passed in
FINGERPRINT_CHARS = 16


def fingerprint(api_key: str) -> str:
    """A key's public name: the start of its sha256 (the key is 256 random bits, so this
    tells nothing of it)."""
    return hashlib.sha256(api_key.encode("utf-8", "surrogatepass")).hexdigest()[:FINGERPRINT_CHARS]


class KeyRing:
    """The API keys adapters were given in this process, by fingerprint (held in memory
    only, as the adapters hold them anyway)."""

    def __init__(self) -> None:
        self._keys: dict[str, str] = {}
        self._lock = threading.Lock()

    def key_for(self, base_url: str, api_key: str | None, saved: str | None) -> str:
        """The key for a server: `api_key` if given; else the one this process was given
        under the `saved` fingerprint; else LEDGER_API_KEY, if it is that key (or none was
        saved). InvalidInput saying what to pass otherwise."""
        if not api_key and saved:
            with self._lock:
                api_key = self._keys.get(saved)
        if not api_key:
            api_key = os.environ.get(API_KEY_ENV) or None
            if api_key and saved and fingerprint(api_key) != saved:
                raise InvalidInput(
                    f"the saved adapter used the API key {saved} (fingerprint) for {base_url}; "
                    f"{API_KEY_ENV} is another key ({fingerprint(api_key)}): pass api_key="
                )
        if not api_key:
            raise InvalidInput(f"no API key for {base_url}: pass api_key= or set {API_KEY_ENV}")
        with self._lock:
            self._keys[fingerprint(api_key)] = api_key
        return api_key


KEYS = KeyRing()
