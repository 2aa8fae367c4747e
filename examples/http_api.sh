#!/usr/bin/env bash
# The plain HTTP API from curl: append, read the context window, replace the history,
# replay an earlier version, read the audit trail and export the session.
#
#   LEDGER_API_KEY=<an admin key> examples/http_api.sh
#
# against a running server (`make serve`; LEDGER_URL, default http://127.0.0.1:8080).
# The admin key is the one `serve` printed on first start, or LEDGER_BOOTSTRAP_KEY.
set -euo pipefail
BASE=${LEDGER_URL:-http://127.0.0.1:8080}
KEY=${LEDGER_API_KEY:?set LEDGER_API_KEY to an admin API key}
SESSION=${SESSION:-user-42%2Fcurl-demo}  # the key "user-42/curl-demo": one path segment, / as %2F
URL="$BASE/v1/sessions/$SESSION"
api() { curl -sS --fail-with-body -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" "$@"; echo; }

echo "# Append two messages, all or none, as one event (the first write also starts the session)"
api -X POST "$URL/messages" -d '{"messages": [
  {"role": "user", "content": "What is the capital of France?"},
  {"role": "assistant", "content": "Paris."}]}'

echo "# Append only if the session is still at version 2; a retry with the same key is applied once"
api -X POST "$URL/messages?reason=follow-up" -H 'If-Match: "2"' -H "Idempotency-Key: turn-2" \
  -d '{"messages": [{"role": "user", "content": "And of Italy?"}]}'

echo "# The context window: the newest messages within 3000 tokens"
api "$URL/context?token_limit=3000"

echo "# Replace the history (the old one stays in the events)"
api -X PUT "$URL/messages?reason=compacted" \
  -d '{"messages": [{"role": "system", "content": "Summary: capitals of France and Italy."}]}'

echo "# The history as it stood at version 3, before the replacement"
api "$URL/messages?as_of_version=3"

echo "# The audit trail: who changed what, when and why"
api "$URL/events"

echo "# The compliance export (admin and auditor keys), one JSON object per line"
api "$URL/export?format=jsonl" | cut -c1-100
