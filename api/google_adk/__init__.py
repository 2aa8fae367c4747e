"""Google ADK sessions kept in the session ledger: `LedgerSessionService`, a
`BaseSessionService` in process or over HTTP (needs the `google-adk` extra)."""

from .layout import from_message, to_message
from .session_service import LedgerSessionService

__all__ = ["LedgerSessionService", "from_message", "to_message"]
