"""The production settings behind a TLS-terminating proxy: all off unless asked for."""

from tests.test_settings import load_settings, settings_values

SECURITY = (
    "getattr(settings, 'SECURE_PROXY_SSL_HEADER', None), settings.SESSION_COOKIE_SECURE, "
    "settings.CSRF_COOKIE_SECURE, settings.SECURE_HSTS_SECONDS"
)


def test_a_laptop_install_on_plain_http_keeps_the_defaults(tmp_path):
    assert settings_values(tmp_path, SECURITY) == [None, False, False, 0]


def test_behind_a_tls_proxy(tmp_path):
    values = settings_values(
        tmp_path, SECURITY, TRUST_X_FORWARDED_PROTO="true", HTTPS="true", HSTS_SECONDS="3600"
    )

    assert values == [["HTTP_X_FORWARDED_PROTO", "https"], True, True, 3600]


def test_trusting_every_address_as_the_proxy_stops_startup(tmp_path):
    process = load_settings(tmp_path, "settings.DEBUG", TRUSTED_PROXY_IPS="0.0.0.0/0")

    assert process.returncode != 0
    assert "TRUSTED_PROXY_IPS includes every address" in process.stderr


def test_a_missing_prometheus_multiprocess_folder_stops_startup(tmp_path):
    process = load_settings(tmp_path, "settings.DEBUG", PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "absent"))

    assert process.returncode != 0
    assert "PROMETHEUS_MULTIPROC_DIR=" in process.stderr and "is not a folder" in process.stderr
