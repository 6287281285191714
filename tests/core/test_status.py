"""What a non-2xx answer means (``status_error``): redirects never followed, bodies that are
not the JSON envelope, bytes that are not UTF-8. The envelopes' meanings are in
test_server_info.py, a proxy's in tests/turn/test_proxied.py."""

from __future__ import annotations

import pytest

from llamaclient import AuthenticationError, HTTPStatusError, ModelNotFoundError
from llamaclient._protocol.status import status_error


@pytest.mark.parametrize("status", [300, 301, 308, 399])
def test_a_redirect_is_named_never_followed(status: int) -> None:
    error = status_error(status, b"moved", "http://elsewhere/")
    assert type(error) is HTTPStatusError
    assert error.status == status
    assert str(error).startswith(
        f"HTTP {status}: redirect to 'http://elsewhere/' not followed; moved"
    ), str(error)


def test_a_redirect_without_a_location_or_a_body_says_just_that() -> None:
    error = status_error(302, b"")
    assert str(error) == "HTTP 302: redirect not followed"
    assert error.body == "redirect not followed"  # type: ignore[attr-defined]


KINDS = [(401, AuthenticationError), (403, AuthenticationError), (400, HTTPStatusError),
         (502, HTTPStatusError)]  # fmt: skip


@pytest.mark.parametrize(("status", "kind"), KINDS)
def test_a_body_that_is_not_the_envelope_keeps_its_text(status: int, kind: type) -> None:
    error = status_error(status, b"<html>Bad Gateway</html>")
    assert type(error) is kind
    assert error.status == status  # type: ignore[attr-defined]
    assert error.body == "<html>Bad Gateway</html>"  # type: ignore[attr-defined]


def test_bytes_that_are_not_utf8_are_replaced_not_raised() -> None:
    error = status_error(500, b"bad \xff\xfe body")
    assert type(error) is HTTPStatusError
    assert error.body == "bad \ufffd\ufffd body"


def test_a_model_not_found_keeps_the_whole_body() -> None:
    body = b'{"error":{"message":"Invalid model name passed in model=x","code":"400"}}'
    error = status_error(400, body)
    assert type(error) is ModelNotFoundError
    assert error.body == body.decode()
