"""A server that signs checkpoints on its own schedule, serves the newest one, and a
`verify --checkpoint` of the store against what it served."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from session_ledger.api.client import LedgerClient
from session_ledger.projections.checkpoint import generate_keys, parse_checkpoint

from .conftest import Server, run_cli, server_env

ADMIN = "e2e-checkpoint-admin-key-0123456789"


def test_serve_signs_checkpoints_and_serves_the_newest(tmp_path: Path) -> None:
    generate_keys(tmp_path / "signing.pem", tmp_path / "public.pem")
    env = server_env(
        f"sqlite:///{tmp_path / 'ledger.db'}", LEDGER_BOOTSTRAP_KEY=ADMIN,
        LEDGER_SIGNING_KEY_FILE=str(tmp_path / "signing.pem"),
        LEDGER_CHECKPOINT_DIR=str(tmp_path / "checkpoints"),
        LEDGER_CHECKPOINT_INTERVAL_MINUTES="0.01",
    )  # fmt: skip
    server = Server(env).start()
    try:
        headers = {"Authorization": f"Bearer {ADMIN}"}
        with httpx.Client(base_url=server.base_url, headers=headers, timeout=30) as http:
            assert http.get("/v1/checkpoints/latest").json()["error"]["code"] == (
                "checkpoint_not_found"
            )
            client = LedgerClient(server.base_url, ADMIN)
            client.put("s/1", {"role": "user", "content": "hello"})
            client.put("s/2", {"role": "user", "content": "hi"})
            served = b""
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and b"s/2" not in served:
                time.sleep(0.2)
                answer = http.get("/v1/checkpoints/latest")
                served = answer.content if answer.status_code == 200 else b""
            assert httpx.get(f"{server.base_url}/v1/checkpoints/latest").status_code == 401
            exported = http.get("/v1/sessions/s%2F1/export").content
    finally:
        server.stop()
    checkpoint = parse_checkpoint(served)
    assert [(k, v) for k, v, _ in checkpoint.sessions] == [("s/1", 2), ("s/2", 2)]
    files = sorted((tmp_path / "checkpoints" / "default").glob("*.json"))
    assert served in [f.read_bytes() for f in files]
    path = tmp_path / "served.json"
    path.write_bytes(served)
    done = run_cli(env, "verify", "--checkpoint", str(path), "--public-key",
                   str(tmp_path / "public.pem"))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("ok      default/") == 2
    (tmp_path / "s1.jsonl").write_bytes(exported)
    done = run_cli(env, "verify-export", str(tmp_path / "s1.jsonl"), "--public-key",
                   str(tmp_path / "public.pem"))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "of the 2-session checkpoint" in done.stdout and "signature verified" in done.stdout
