"""Google ADK sessions kept in the session ledger: `LedgerSessionService`, a
`BaseSessionService` in process or over HTTP (needs the `google-adk` extra)."""

from .session_service import LedgerSessionService, from_message, to_message

__all__ = ["LedgerSessionService", "from_message", "to_message"]
