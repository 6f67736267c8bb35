"""Leader election on a Lease served by kmock (with ApiSim's optimistic concurrency) over real HTTP."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import kmock
import pytest
from kube_apisim import ApiSim, status

from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.leader import LeaderElectionConfig, LeaderElector

NS, LEASE = "gpufleet-system", "gpufleet-scheduler"
LEASES = kmock.resource("coordination.k8s.io", "v1", "leases")


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


class Timeline:
    def __init__(self) -> None:
        self.events: list[tuple[float, str, str]] = []
        self._lock = threading.Lock()

    def add(self, who: str, what: str) -> None:
        with self._lock:
            self.events.append((time.monotonic(), who, what))

    def at(self, who: str, what: str) -> float:
        with self._lock:
            return next(t for t, w, e in self.events if w == who and e == what)

    def count(self, what: str) -> int:
        with self._lock:
            return sum(1 for _, _, e in self.events if e == what)


@pytest.fixture
def timeline() -> Timeline:
    return Timeline()


@pytest.fixture
def elector(client: KubeClient, timeline: Timeline) -> Iterator[Callable[..., LeaderElector]]:
    made: list[LeaderElector] = []

    def make(identity: str, **config: object) -> LeaderElector:
        settings: dict[str, object] = {"lease_duration": 1.0, "renew_deadline": 0.6, "retry_period": 0.1}
        settings.update(config)
        cfg = LeaderElectionConfig(LEASE, NS, identity, **settings)  # type: ignore[arg-type]
        e = LeaderElector(client, cfg,
                          on_started_leading=lambda: timeline.add(identity, "started"),
                          on_stopped_leading=lambda: timeline.add(identity, "stopped"))
        made.append(e)
        return e

    yield make
    for e in made:
        e.stop()


def lease_spec(apisim: ApiSim) -> dict[str, object]:
    lease = apisim.get(r.LEASES, NS, LEASE)
    assert lease is not None
    return lease["spec"]  # type: ignore[no-any-return]


def test_two_electors_exactly_one_leads(apisim: ApiSim, elector: Callable[..., LeaderElector],
                                        timeline: Timeline) -> None:
    a, b = elector("a"), elector("b")
    a.start()
    b.start()
    wait_until(lambda: a.is_leader() or b.is_leader())
    leader, follower = (a, b) if a.is_leader() else (b, a)
    deadline = time.monotonic() + 1.5  # longer than a lease duration: the leader keeps renewing
    while time.monotonic() < deadline:
        assert leader.is_leader() and not follower.is_leader()
        time.sleep(0.02)
    assert lease_spec(apisim)["holderIdentity"] == leader.config.identity
    assert follower.leader == leader.config.identity
    assert timeline.count("started") == 1 and timeline.count("stopped") == 0
    renewals = [q for q in apisim.writes(r.LEASES, "PUT")
                if q.data["spec"]["holderIdentity"] == leader.config.identity]
    assert len(renewals) >= 5
    assert all(q.data["metadata"]["resourceVersion"] for q in renewals)  # every write is conditional


def test_takeover_after_the_leader_stops_renewing(apisim: ApiSim, elector: Callable[..., LeaderElector],
                                                  timeline: Timeline) -> None:
    a = elector("a")
    a.start()
    assert a.wait_until_leading(5.0)
    b = elector("b")
    b.start()
    time.sleep(0.3)
    assert not b.is_leader()
    # From now on every renewal by "a" fails with 500 (kmock reaction above ApiSim's priority).
    fail_a = apisim.kmock["put", LEASES, lambda req: (req.data or {}).get("spec", {}).get("holderIdentity") == "a"]
    apisim.harness.call(lambda: fail_a << 500 << status(500, "InternalError", "etcd timeout"))
    wait_until(lambda: b.is_leader(), timeout=5.0)
    wait_until(lambda: timeline.count("started") == 2)  # the callback runs on its own thread

    a_stopped, b_started, a_renewed = timeline.at("a", "stopped"), timeline.at("b", "started"), a.last_renewal
    assert a_stopped < b_started  # never two leaders
    assert a_stopped - a_renewed <= 0.6 + 0.3  # renew deadline (+ one retry and slack)
    assert b_started - a_renewed >= 1.0  # b waited a lease duration after the last renewal it saw
    assert not a.is_leader() and not a.running  # run() returns after a loss: the process restarts
    spec = lease_spec(apisim)
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1


def test_release_on_shutdown_hands_over_without_waiting_for_expiry(
    apisim: ApiSim, elector: Callable[..., LeaderElector], timeline: Timeline
) -> None:
    slow = {"lease_duration": 10.0, "renew_deadline": 5.0, "retry_period": 0.1}
    a = elector("a", **slow)
    a.start()
    assert a.wait_until_leading(5.0)
    b = elector("b", **slow)
    b.start()
    time.sleep(0.3)
    stopped_at = time.monotonic()
    a.stop()
    assert not a.is_leader() and timeline.count("stopped") == 1
    release = [q for q in apisim.writes(r.LEASES, "PUT") if q.data["spec"]["holderIdentity"] == ""]
    assert len(release) == 1 and release[0].data["spec"]["leaseDurationSeconds"] == 1
    wait_until(lambda: b.is_leader(), timeout=2.0)
    assert time.monotonic() - stopped_at < 2.0  # far less than the 10 s lease
    assert lease_spec(apisim)["holderIdentity"] == "b"


def test_without_release_a_successor_waits_for_expiry(
    apisim: ApiSim, elector: Callable[..., LeaderElector], timeline: Timeline
) -> None:
    a = elector("a", release_on_shutdown=False, lease_duration=1.0)
    a.start()
    assert a.wait_until_leading(5.0)
    b = elector("b")
    b.start()
    time.sleep(0.2)
    a.stop()  # like a crash: the lease still names "a"
    assert lease_spec(apisim)["holderIdentity"] == "a"
    wait_until(lambda: b.is_leader(), timeout=5.0)
    wait_until(lambda: timeline.count("started") == 2)
    assert timeline.at("b", "started") - a.last_renewal >= 1.0


def test_stale_resource_version_conflict_is_a_lost_race(
    apisim: ApiSim, elector: Callable[..., LeaderElector]
) -> None:
    a = elector("a")
    assert a.try_acquire_or_renew()  # creates the lease
    assert lease_spec(apisim)["holderIdentity"] == "a"
    # Another replica grabs the lease behind a's back (a's cached resourceVersion is now stale).
    apisim.modify(r.LEASES, NS, LEASE, {"spec": {"holderIdentity": "x", "renewTime": "2026-01-01T00:00:00.000000Z"}})
    before = len(apisim.writes(r.LEASES, "PUT"))
    assert not a.try_acquire_or_renew()  # freshly observed holder x: not expired for a
    assert len(apisim.writes(r.LEASES, "PUT")) == before  # read, saw x, did not write
    assert a.leader == "x"

    b = elector("b")
    # b sees an unexpired lease held by x too; force its write to race and lose with a 409.
    apisim.modify(r.LEASES, NS, LEASE, {"spec": {"holderIdentity": ""}})
    puts = apisim.kmock["put", LEASES]
    apisim.harness.call(lambda: puts[:1] << 409 << status(409, "Conflict", "the object has been modified"))
    assert not b.try_acquire_or_renew()
    assert b.try_acquire_or_renew()  # the next attempt wins
    assert lease_spec(apisim)["holderIdentity"] == "b"


def test_create_race_already_exists_is_a_lost_race(apisim: ApiSim, elector: Callable[..., LeaderElector]) -> None:
    posts = apisim.kmock["post", LEASES]
    apisim.harness.call(lambda: posts[:1] << 409 << status(409, "AlreadyExists", "leases already exists"))
    a = elector("a")
    assert not a.try_acquire_or_renew()
    assert a.try_acquire_or_renew()
    [created] = [q for q in apisim.requests(r.LEASES, "CREATE")][1:]
    assert created.url.path == f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
    spec = created.data["spec"]
    assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 1 and spec["leaseTransitions"] == 0
    assert spec["acquireTime"] == spec["renewTime"] and spec["renewTime"].endswith("Z")


def test_is_leader_turns_false_after_lease_duration_even_if_the_loop_is_stuck(
    apisim: ApiSim, client: KubeClient
) -> None:
    now = [1000.0]
    cfg = LeaderElectionConfig(LEASE, NS, "a", lease_duration=30.0, renew_deadline=20.0, retry_period=0.1)
    e = LeaderElector(client, cfg, clock=lambda: now[0])
    e.start()
    try:
        assert e.wait_until_leading(5.0)
        assert e.is_leader()
        apisim.harness.call(lambda: apisim.kmock["put", LEASES] << 500 << status(500, "InternalError", "down"))
        time.sleep(0.3)  # renewals now fail; the loop still believes it leads (deadline not reached)
        now[0] += 29.0
        assert e.is_leader()
        now[0] += 2.0  # 31 s without a renewal: past the lease duration
        assert not e.is_leader()
        wait_until(lambda: not e.running)  # and the loop steps down at its next attempt
    finally:
        e.stop()


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="greater than renew_deadline"):
        LeaderElectionConfig(LEASE, NS, "a", lease_duration=10, renew_deadline=10)
    with pytest.raises(ValueError, match="retry_period"):
        LeaderElectionConfig(LEASE, NS, "a", lease_duration=15, renew_deadline=2, retry_period=2)
    with pytest.raises(ValueError, match="identity"):
        LeaderElectionConfig(LEASE, NS, "")
