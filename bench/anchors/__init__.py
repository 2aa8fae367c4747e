"""The systems session-ledger is measured against: the raw databases and the peers."""
