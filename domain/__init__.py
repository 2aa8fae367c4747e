"""Write model: messages, the Session aggregate, the Ledger service."""
