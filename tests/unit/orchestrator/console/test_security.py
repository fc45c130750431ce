"""The guard's parts: constant-time comparison, our headers in place of any others, a
redirect that stays on this host, and a POST from another site's page refused."""

from __future__ import annotations

import pytest

from orchestrator.console.security import (
    CSP,
    HEADERS,
    Guard,
    Secrets,
    _local_path,
    csrf_ok,
    same,
    with_headers,
)

pytestmark = pytest.mark.unit


def test_each_start_has_its_own_token_csrf_token_and_a_cookie_per_port() -> None:
    a, b = Secrets.new(8000), Secrets.new(8001)
    assert a.token != b.token and a.csrf != b.csrf and a.cookie != b.cookie
    assert len(a.token) == 48 and len(a.csrf) >= 40
    assert a.token not in repr(a) and a.csrf not in repr(a)


def test_comparison_takes_only_the_exact_value() -> None:
    assert same("abc", "abc")
    assert not same("abd", "abc") and not same("", "abc") and not same(None, "abc") and not same("abcd", "abc")
    assert not same("\udcff", "abc")  # not even text that cannot be encoded raises
    keys = Secrets.new()
    assert csrf_ok({"csrf": keys.csrf}, keys) and not csrf_ok({"csrf": ["x"]}, keys) and not csrf_ok({}, keys)


def test_our_headers_replace_any_of_the_same_name() -> None:
    out = with_headers([(b"Cache-Control", b"max-age=3600"), (b"etag", b"x")])
    assert (b"etag", b"x") in out and (b"Cache-Control", b"max-age=3600") not in out
    assert dict(out)[b"cache-control"] == b"no-store" and dict(out)[b"content-security-policy"] == CSP.encode()
    assert len(HEADERS) == len({k for k, _ in HEADERS})


@pytest.mark.parametrize(
    ("scope", "path"),
    [
        ({"raw_path": b"/runs/a%20b"}, "/runs/a%20b"),
        ({"raw_path": b"//evil.example/x"}, "/evil.example/x"),
        ({"path": "/runs/a b"}, "/runs/a%20b"),
        ({}, "/"),
    ],
)
def test_the_redirect_after_the_token_is_a_path_on_this_host(scope: dict, path: str) -> None:
    assert _local_path(scope) == path


@pytest.mark.parametrize(
    ("headers", "ok"),
    [
        ([], True),
        ([(b"host", b"127.0.0.1:8000"), (b"origin", b"http://127.0.0.1:8000")], True),
        ([(b"host", b"127.0.0.1:8000"), (b"origin", b"http://evil.example")], False),
        ([(b"host", b"127.0.0.1:8000"), (b"origin", b"null"), (b"sec-fetch-site", b"same-origin")], True),
        ([(b"host", b"127.0.0.1:8000"), (b"origin", b"null"), (b"sec-fetch-site", b"cross-site")], False),
        ([(b"host", b"127.0.0.1:8000"), (b"sec-fetch-site", b"same-site")], False),
        ([(b"origin", b"http://127.0.0.1:8000")], False),
    ],
)
def test_a_post_is_taken_from_this_sites_pages_alone(headers: list, ok: bool) -> None:
    assert Guard._same_origin({"headers": headers}) is ok
