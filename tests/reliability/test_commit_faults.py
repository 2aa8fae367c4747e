"""Connections cut before, during and right after COMMIT, under concurrent writers through
two API processes: no acknowledged write lost, none applied twice."""

from __future__ import annotations

import pytest

from .conftest import Service
from .workload import Workload


def run_with_commit_faults(service: Service, keyed: bool, per_thread: int, rate: float) -> None:
    service.proxy.commit_fault_rate = rate
    workload = Workload(service.urls, service.api_key, keyed=keyed, threads=4, sessions=2)
    workload.run(per_thread=per_thread)
    service.proxy.commit_fault_rate = 0.0
    tally = workload.check(service.urls[0])
    tally.faults = dict(service.proxy.faults)
    print(tally.line(f"commit faults ({'keyed' if keyed else 'unkeyed'})"))
    assert sum(tally.faults.values()) > 0
    assert tally.lost == 0
    assert tally.duplicated == 0
    assert not [a for a in tally.answers if a.startswith("500")], tally.answers


@pytest.mark.postgres
@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "unkeyed"])
def test_commits_cut_short_run(shared_server_service: Service, keyed: bool) -> None:
    run_with_commit_faults(shared_server_service, keyed, per_thread=60, rate=0.25)


@pytest.mark.postgres
@pytest.mark.long_run
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "unkeyed"])
def test_commits_cut_long_run(shared_server_service: Service, keyed: bool) -> None:
    run_with_commit_faults(shared_server_service, keyed, per_thread=600, rate=0.15)
