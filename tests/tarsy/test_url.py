"""The rules for a TARSy base URL (scoring.tarsy.url)."""

import pytest

from scoring.tarsy.url import canonical_url, is_loopback, plain_http_problem, tarsy_url_problem


@pytest.mark.parametrize(
    "url",
    ["https://tarsy.example.com", "http://127.0.0.1:8080", "https://[::1]:8443/tarsy", "http://tarsy-api.ns.svc:80"],
)
def test_a_base_url_is_accepted(url):
    assert tarsy_url_problem(url) is None


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("https://tarsy.example.com:99999", "has no valid port"),
        ("https://tarsy.example.com:0", "has no valid port"),
        ("https://tarsy.example.com:", "has no valid port"),
        ("https://tarsy.example.com:http", "has no valid port"),
        ("https://tarsy_example.com", "has no valid host name or address"),
        ("https://-tarsy.example.com", "has no valid host name or address"),
        ("https://tarsy..example.com", "has no valid host name or address"),
        ("https://user:pw@tarsy.example.com", "is not an http(s) URL without credentials"),
        ("ftp://tarsy.example.com", "is not an http(s) URL without credentials"),
    ],
)
def test_a_bad_base_url_is_refused_saying_why(url, problem):
    assert problem in tarsy_url_problem(url)


def test_one_tarsy_has_one_spelling():
    spellings = [
        "https://tarsy.example.com",
        "HTTPS://Tarsy.Example.COM/",
        "https://tarsy.example.com:443",
        "https://tarsy.example.com.//",
        " https://tarsy.example.com ",
    ]
    assert {canonical_url(url) for url in spellings} == {"https://tarsy.example.com"}
    assert canonical_url("http://tarsy.example.com:8080/base/") == "http://tarsy.example.com:8080/base"
    assert canonical_url("http://[::1]:80") == "http://[::1]"


@pytest.mark.parametrize(
    ("url", "loopback"),
    [("http://127.0.0.1:9", True), ("http://127.8.0.1", True), ("http://[::1]", True), ("http://localhost", True),
     ("http://10.0.0.1", False), ("http://tarsy.example.com", False), ("http://localhost.example.com", False)],
)  # fmt: skip
def test_loopback_urls_are_this_machine(url, loopback):
    assert is_loopback(url) is loopback


def test_credentials_go_over_plain_http_only_to_this_machine_or_when_allowed():
    remote = "http://tarsy.example.com"
    assert "is plain http" in plain_http_problem(remote, has_credentials=True, allowed=False)
    assert plain_http_problem(remote, has_credentials=True, allowed=True) is None
    assert plain_http_problem(remote, has_credentials=False, allowed=False) is None
    assert plain_http_problem("https://tarsy.example.com", has_credentials=True, allowed=False) is None
    assert plain_http_problem("http://127.0.0.1:8080", has_credentials=True, allowed=False) is None
