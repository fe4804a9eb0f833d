"""The rules for a TARSy base URL, shared by the settings (TARSY_URL, TARSY_DASHBOARD_URL)
and ``manage.py sync_sessions URL``. It imports nothing of Django: settings load it."""

import ipaddress
import re
import urllib.parse

# No user:password@ part: the URL is shown in /metrics, logs and each session's writer.
_TARSY_URL = re.compile(r"https?://[^\s/@?#]+(/[^\s?#]*)?", re.IGNORECASE)
_HOST_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)", re.IGNORECASE)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def tarsy_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be TARSy's base URL, or None if it can."""
    if not _TARSY_URL.fullmatch(url):
        return (
            f"{url!r} is not an http(s) URL without credentials or query "
            "(e.g. https://tarsy.example.com; the token goes in TARSY_TOKEN or --token)"
        )
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0 or (parts.netloc.endswith(":") and port is None):
        return f"{url!r} has no valid port (1-65535)"
    if not _valid_host(parts.hostname or ""):
        return f"{url!r} has no valid host name or address"
    return None


def _valid_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    labels = host.rstrip(".").split(".")
    return len(host) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in labels)


def canonical_url(url: str) -> str:
    """One spelling of each TARSy base URL (the key of its sync and of what it synced): scheme and
    host lower-case, the scheme's default port left out, no trailing slash."""
    parts = urllib.parse.urlsplit(url.strip())
    host = (parts.hostname or "").rstrip(".")
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    port = parts.port
    netloc = host if port in (None, _DEFAULT_PORTS.get(parts.scheme.lower())) else f"{host}:{port}"
    return urllib.parse.urlunsplit((parts.scheme.lower(), netloc, parts.path.rstrip("/"), "", ""))


def is_loopback(url: str) -> bool:
    """Whether ``url`` names this machine (traffic to it never leaves it)."""
    host = (urllib.parse.urlsplit(url).hostname or "").rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def plain_http_problem(url: str, *, has_credentials: bool, allowed: bool) -> str | None:
    """Why credentials cannot be sent to ``url``, or None: plain HTTP would show them to every
    network hop, so it needs ``allowed`` (TARSY_ALLOW_PLAIN_HTTP, --allow-plain-http) unless the
    URL is this machine's."""
    if not has_credentials or allowed or urllib.parse.urlsplit(url).scheme.lower() != "http":
        return None
    if is_loopback(url):
        return None
    return (
        f"{url} is plain http: the credentials would cross the network unencrypted. Use https (with "
        "TARSY_CA_BUNDLE for a private CA), or allow it explicitly (TARSY_ALLOW_PLAIN_HTTP=true, "
        "--allow-plain-http)"
    )
