"""What the dashboard refuses: a redirect after login to anything but a path of its
own."""

from __future__ import annotations

import pytest
from api_helpers import READ_TOKEN, TOKEN
from conftest import Store
from test_dashboard import Dash

from simpleworkflow.server import Auth

AUTH = Auth(token=TOKEN, read_token=READ_TOKEN)


@pytest.mark.parametrize(
    ("given", "goes_to"),
    [
        ("/runs?status=failed", "/runs?status=failed"),
        ("/runs/x", "/runs/x"),
        ("/\t/evil.example", "/"),  # next=/%09/evil.example: browsers drop the tab
        ("/\n/evil.example", "/"),
        ("/runs\r\nSet-Cookie: x=1", "/"),  # a header split: used to drop the connection
        ("//evil.example/", "/"),
        ("/\\evil.example", "/"),
        ("/%2F/evil.example", "/"),
        ("/%5Cevil.example", "/"),
        ("/%09/evil.example", "/"),
        ("https://evil.example/", "/"),
        ("javascript:alert(1)", "/"),
        ("runs", "/"),
        ("/r\u00e9sum\u00e9", "/"),
        ("", "/"),
    ],
)
def test_after_login_only_a_path_of_this_site_is_followed(
    store: Store, given: str, goes_to: str
) -> None:
    dash = Dash(store, auth=AUTH)
    try:
        form = dash.get("/login", params={"next": given})
        assert form.status_code == 200
        opened = dash.post(
            "/login", data={"csrf_token": dash.csrf("/login"), "token": TOKEN, "next": given}
        )
        assert opened.status_code == 303 and opened.headers["location"] == goes_to
    finally:
        dash.close()
