"""A PostgreSQL primary and a streaming standby of it, made for the tests: `initdb` and
`pg_basebackup` (as the `postgres` OS user when run as root) into a temporary folder, on
free ports. The shared test server is never touched: the pair is the tests' own."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

STARTUP_SECONDS = 60


def postgres_bin() -> Path | None:
    """The folder of the PostgreSQL server binaries (LEDGER_TEST_PG_BIN, else the newest
    under /usr/lib/postgresql), or None."""
    named = os.environ.get("LEDGER_TEST_PG_BIN")
    candidates = [Path(named)] if named else sorted(
        Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name), reverse=True
    )  # fmt: skip
    return next((p for p in candidates if (p / "pg_basebackup").exists()), None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresPair:
    """A primary (`primary_url`) and its hot standby (`standby_url`), database `ledger`."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="ledger-replica-"))
        self.as_postgres: list[str] = []
        if os.geteuid() == 0:  # the server refuses to run as root
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self.as_postgres = ["runuser", "-u", "postgres", "--"]
        self.primary_port, self.standby_port = free_port(), free_port()
        self.primary_dir, self.standby_dir = self.root / "primary", self.root / "standby"

    def url(self, port: int) -> str:
        return f"postgresql://postgres@127.0.0.1:{port}/ledger"

    @property
    def primary_url(self) -> str:
        return self.url(self.primary_port)

    @property
    def standby_url(self) -> str:
        return self.url(self.standby_port)

    def _run(self, *args: str) -> None:
        done = subprocess.run(
            [*self.as_postgres, *args], capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode:
            raise RuntimeError(f"{' '.join(args[:2])} failed: {done.stdout}{done.stderr}")

    def _configure(self, data: Path, port: int) -> None:
        with (data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\nport = {port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.root}'\nshared_buffers = 16MB\n"
                "wal_level = replica\nmax_wal_senders = 4\nhot_standby = on\n"
                "hot_standby_feedback = on\n"
            )

    def start(self) -> PostgresPair:
        self._run(str(self.bin / "initdb"), "-D", str(self.primary_dir), "-U", "postgres",
                  "--auth=trust", "-E", "UTF8", "--no-sync")  # fmt: skip
        self._configure(self.primary_dir, self.primary_port)
        self._pg_ctl(self.primary_dir, "start")
        admin = self.primary_url.replace("/ledger", "/postgres")
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("CREATE DATABASE ledger")
        self._run(str(self.bin / "pg_basebackup"), "-h", "127.0.0.1", "-p",
                  str(self.primary_port), "-U", "postgres", "-D", str(self.standby_dir),
                  "-R", "-X", "stream", "-c", "fast")  # fmt: skip
        self._configure(self.standby_dir, self.standby_port)
        self.start_standby()
        return self

    def _pg_ctl(self, data: Path, action: str) -> None:
        log = self.root / f"{data.name}.log"
        extra = ["-m", "fast"] if action == "stop" else ["-l", str(log)]
        self._run(str(self.bin / "pg_ctl"), "-D", str(data), "-w", "-t",
                  str(STARTUP_SECONDS), *extra, action)  # fmt: skip

    def start_standby(self) -> None:
        self._pg_ctl(self.standby_dir, "start")
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:  # accepting connections, in recovery, and streaming
            try:
                with psycopg.connect(self.standby_url, connect_timeout=2) as conn:
                    row = conn.execute("SELECT pg_is_in_recovery(), status FROM "
                                       "pg_stat_wal_receiver").fetchone()  # fmt: skip
                    if row is not None and row[0] and row[1] == "streaming":
                        return
            except psycopg.OperationalError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the standby did not start streaming")
            time.sleep(0.1)

    def stop_standby(self) -> None:
        self._pg_ctl(self.standby_dir, "stop")

    def replay(self, *, paused: bool) -> None:
        """Pause or resume the standby's replay of the primary's WAL (it keeps receiving)."""
        call = "pg_wal_replay_pause" if paused else "pg_wal_replay_resume"
        with psycopg.connect(self.standby_url, autocommit=True) as conn:
            conn.execute(f"SELECT {call}()")

    def close(self) -> None:
        for data in (self.standby_dir, self.primary_dir):
            if (data / "postmaster.pid").exists():
                subprocess.run([*self.as_postgres, str(self.bin / "pg_ctl"), "-D", str(data),
                                "-m", "immediate", "-w", "stop"], capture_output=True,
                               timeout=120, check=False)  # fmt: skip
        shutil.rmtree(self.root, ignore_errors=True)


def start_pair_or_skip() -> PostgresPair:
    """A running pair; a loud skip when this machine cannot make one (a failure instead
    when LEDGER_REQUIRE_POSTGRES=1 and the binaries exist)."""
    bin_dir = postgres_bin()
    if bin_dir is None:
        pytest.skip("SKIPPING READ REPLICA TESTS: no PostgreSQL server binaries (initdb, "
                    "pg_basebackup); set LEDGER_TEST_PG_BIN to their folder")  # fmt: skip
    try:
        pair = PostgresPair(bin_dir)
    except KeyError:
        pytest.skip("SKIPPING READ REPLICA TESTS: run as root and no `postgres` OS user")
    try:
        return pair.start()
    except (RuntimeError, OSError, psycopg.Error, subprocess.SubprocessError) as e:
        pair.close()
        reason = f"cannot make a PostgreSQL primary and standby: {e}"
        if os.environ.get("LEDGER_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"{reason} (LEDGER_REQUIRE_POSTGRES=1)")
        pytest.skip(f"SKIPPING READ REPLICA TESTS: {reason}")
