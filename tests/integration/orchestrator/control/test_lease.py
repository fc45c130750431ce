"""The controller lease on real object stores: a generation claimed by a conditional
write is claimed once, on the S3 server (If-None-Match) and on the GCS emulator
(ifGenerationMatch=0), and a lease taken there refuses the next taker."""

from __future__ import annotations

import pytest

from orchestrator.control.lease import ControllerLease, LeaseHeld
from tests.support.servers import scoped_env

pytestmark = pytest.mark.integration
KEY = b"k" * 32


@pytest.mark.parametrize(
    ("region", "url", "extra"),
    [("local-a", "s3://orch-a/leases", {}), ("local-c", "gs://orch-c/leases", {"token": "anon", "project": "p"})],
)
def test_a_generation_is_claimed_once_and_a_held_lease_refuses(cloud_stores, region, url, extra) -> None:
    from recovery.storage import open_fs

    with scoped_env(cloud_stores["env"]):
        fs, root = open_fs(f"{url}/run-1", {"endpoint_url": cloud_stores["servers"][region].endpoint, **extra})
        first = ControllerLease(fs, root, KEY, "run-1", 30.0, sleep=lambda s: None)
        second = ControllerLease(fs, root, KEY, "run-1", 30.0, sleep=lambda s: None)
        assert first.claim(7) and not second.claim(7)
        assert second.claimed() == 7
        assert first.take().controller == 8
        with pytest.raises(LeaseHeld, match="driven by controller 8"):
            second.take()
        first.release()
        assert second.take().controller == 9
