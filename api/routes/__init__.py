"""One router per resource: sessions, API keys, health and metrics."""
