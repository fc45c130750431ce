"""notify.secret (orchestrator/notify/secret.py): the targets given whole kept private, config.json naming
them by what may be shown, and a damaged or odd file costing only what it cannot give."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.schema import NotifyConfig
from orchestrator.runstate.rundir import NOTIFY_SECRET
from tests.unit.orchestrator.notify.test_notifier import RUN, TOKEN

pytestmark = pytest.mark.unit


def _kept_run(tmp_path: Path) -> tuple[Path, NotifyConfig]:
    """A run folder whose notify.secret was written, and notify.* as its config.json names it."""
    from orchestrator.notify import secret as notify_secret

    run_dir = tmp_path / RUN
    run_dir.mkdir()
    whole = NotifyConfig(command=f"notify.sh --token {TOKEN}", webhook=f"https://hooks.example.com/s/{TOKEN}?t={TOKEN}")
    notify_secret.save(str(run_dir), whole)
    return run_dir, notify_secret.kept(whole)


def test_notify_secret_gives_back_what_it_was_given_and_config_json_names_it_by_what_may_be_shown(
    tmp_path: Path,
) -> None:
    from orchestrator.notify import secret as notify_secret

    run_dir, named = _kept_run(tmp_path)
    assert (named.command, named.webhook) == ("notify.secret:notify.sh", "notify.secret:https://hooks.example.com")
    assert notify_secret.kept(named) == named
    got, lost = notify_secret.load(str(run_dir), named)
    assert (got.command, got.webhook, lost) == (
        f"notify.sh --token {TOKEN}",
        f"https://hooks.example.com/s/{TOKEN}?t={TOKEN}",
        [],
    )
    assert (run_dir / NOTIFY_SECRET).stat().st_mode & 0o777 == 0o600
    assert [p.name for p in run_dir.iterdir()] == [NOTIFY_SECRET]  # no temporary file left
    # A target given whole (a fresh run's) is taken as it is; none kept: no file is read.
    whole = NotifyConfig(webhook="https://h.example.com/x")
    assert notify_secret.load(str(tmp_path / "nowhere"), whole) == (whole, [])
    # Nothing to keep: no file.
    notify_secret.save(str(tmp_path), NotifyConfig())
    assert not (tmp_path / NOTIFY_SECRET).exists()
    with pytest.raises(ValueError, match="env:VARNAME"):
        notify_secret.save(str(tmp_path), NotifyConfig(webhook="env:HOOK"))
    # A run with nothing to keep leaves none from before.
    notify_secret.save(str(run_dir), NotifyConfig())
    assert not (run_dir / NOTIFY_SECRET).exists()


SECRET_DAMAGE: dict[str, tuple[Any, list[tuple[str, str]]]] = {
    "empty": (b"", [("command", "damaged"), ("webhook", "damaged")]),
    "not-json": (b"\xff\xfe garbage", [("command", "damaged"), ("webhook", "damaged")]),
    "a-list": ([1, 2], [("command", "damaged"), ("webhook", "damaged")]),
    "another-version": ({"version": 2}, [("command", "damaged"), ("webhook", "damaged")]),
    "another-run": ({"run_id": "other"}, [("command", "another run's"), ("webhook", "another run's")]),
    "no-webhook": ({"webhook": None}, [("webhook", "holds no webhook")]),
    "webhook-not-a-string": ({"webhook": 5}, [("webhook", "damaged (not one a run can use)")]),
    "webhook-ftp": ({"webhook": f"ftp://hooks.example.com/{TOKEN}"}, [("webhook", "not one a run can use")]),
    "webhook-kept": ({"webhook": "notify.secret:https://hooks.example.com"}, [("webhook", "not one a run can use")]),
    "webhook-env": ({"webhook": "env:HOOK"}, [("webhook", "not one a run can use")]),
    "webhook-elsewhere": ({"webhook": f"https://evil.example.com/{TOKEN}"}, [("webhook", "not the one config.json")]),
    "command-other-program": ({"command": f"sh -c {TOKEN}"}, [("command", "not the one config.json")]),
    "command-unclosed-quote": ({"command": "notify.sh 'x"}, [("command", "not one a run can use")]),
    "too-long": (b"{" + b" " * 70_000 + b"}", [("command", "damaged"), ("webhook", "damaged")]),
}


@pytest.mark.parametrize("how", list(SECRET_DAMAGE))
def test_a_damaged_notify_secret_costs_the_targets_it_cannot_give_and_never_shows_a_value(
    tmp_path: Path, how: str
) -> None:
    from orchestrator.notify import secret as notify_secret

    run_dir, named = _kept_run(tmp_path)
    path = run_dir / NOTIFY_SECRET
    damage, expected = SECRET_DAMAGE[how]
    if isinstance(damage, bytes):
        path.write_bytes(damage)
    elif isinstance(damage, dict):
        path.write_text(json.dumps({**json.loads(path.read_text()), **damage}))
    else:
        path.write_text(json.dumps(damage))
    got, lost = notify_secret.load(str(run_dir), named)
    assert [(x.target, x.endpoint) for x in lost] == [
        (t, {"command": "notify.sh", "webhook": "https://hooks.example.com"}[t]) for t, _ in expected
    ]
    for off, (_, words) in zip(lost, expected, strict=True):
        assert words in off.reason and TOKEN not in off.reason and "\n" not in off.reason
    for target in ("command", "webhook"):
        assert getattr(got, target) is None if target in {t for t, _ in expected} else TOKEN in getattr(got, target)


@pytest.mark.parametrize("what", ["folder", "fifo", "link"])
def test_a_notify_secret_that_is_no_plain_file_is_never_followed_or_waited_on(tmp_path: Path, what: str) -> None:
    from orchestrator.notify import secret as notify_secret

    run_dir, named = _kept_run(tmp_path)
    path = run_dir / NOTIFY_SECRET
    real = tmp_path / "elsewhere.json"
    real.write_bytes(path.read_bytes())
    real.chmod(0o600)
    path.unlink()
    if what == "folder":
        path.mkdir()
    elif what == "fifo":
        os.mkfifo(path, 0o600)
    else:
        path.symlink_to(real)
    got, lost = notify_secret.load(str(run_dir), named)
    assert (got.command, got.webhook) == (None, None) and [x.target for x in lost] == ["command", "webhook"]
