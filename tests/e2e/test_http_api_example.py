"""examples/http_api.sh, the plain HTTP API from curl, against a real server on each store."""

from __future__ import annotations

import uuid

from tests.examples.test_examples import EXAMPLES, run

from .conftest import Deployment


def test_http_api_script(deployment: Deployment) -> None:
    env = {"LEDGER_URL": deployment.base_url, "LEDGER_API_KEY": deployment.keys["a_admin"],
           "SESSION": f"curl-{uuid.uuid4().hex[:8]}%2Fdemo"}  # fmt: skip
    printed = run("bash", str(EXAMPLES / "http_api.sh"), env=env)
    answers = [line for line in printed.splitlines() if not line.startswith("#")]
    assert answers[0] == '{"version":2,"message_count":2,"replayed":false,"removed":[]}'
    assert answers[1] == '{"version":3,"message_count":3,"replayed":false,"removed":[]}'
    assert answers[2].count('"role"') == 3 and "And of Italy?" in answers[2]
    assert answers[3].startswith('{"version":4,"message_count":1,')
    # Version 3 replayed, as the window showed it then: the history's one page.
    assert answers[4] == answers[2].removesuffix("}") + ',"next_cursor":null}'
    assert '"event_type":"HistoryReplaced"' in answers[5] and '"reason":"compacted"' in answers[5]
    assert answers[6].startswith('{"record":"header"') and answers[-2].startswith(
        '{"record":"trailer","events":4,'
    )
