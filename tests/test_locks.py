"""The two lock files: the runtime lock is the dev lock's subset, pin for pin.

The Docker image and bin/run install requirements/base.txt, the suite runs on dev.txt:
a package pinned differently, or only in dev.txt, would go untested where it runs.
(tests/test_runtime_lock.py installs base.txt alone and runs the scale-out topology on it.)
"""

import re
from pathlib import Path

REQUIREMENTS = Path(__file__).resolve().parents[1] / "requirements"


def canonical(name: str) -> str:
    """PEP 503 normalised name: channels_redis, channels-redis and Channels.Redis are one."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lock_file: str) -> dict[str, str]:
    found = {}
    for line in (REQUIREMENTS / lock_file).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"{lock_file}: {line!r} is not pinned with =="
            found[canonical(name)] = version
    return found


def direct(in_file: str) -> set[str]:
    names = set()
    for line in (REQUIREMENTS / in_file).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-r"):
            names.add(canonical(re.match(r"[A-Za-z0-9_.-]+", line).group()))
    return names


def test_every_runtime_pin_is_in_the_dev_lock_at_the_same_version():
    base, dev = pins("base.txt"), pins("dev.txt")

    assert {
        name: (version, dev.get(name)) for name, version in base.items() if dev.get(name) != version
    } == {}


def test_each_lock_pins_its_direct_requirements():
    assert direct("base.in") - set(pins("base.txt")) == set()
    assert direct("dev.in") - set(pins("dev.txt")) == set()


def test_the_runtime_lock_has_what_scale_out_needs():
    # REDIS_URL switches on channels-redis (channel layer), redis-py (django-q2 broker, cache).
    assert {"channels-redis", "redis"} <= direct("base.in") & set(pins("base.txt"))


def test_dev_in_does_not_repeat_what_base_in_has():
    assert direct("dev.in") & direct("base.in") == set()


def test_the_suite_runs_on_exactly_the_dev_lock():
    # CI installs dev.txt into a new .venv: a package left in a developer's .venv (one the
    # lock dropped) would let the suite pass here and fail to import there.
    from importlib import metadata

    installed = {
        canonical(dist.metadata["Name"]): dist.version
        for dist in metadata.distributions()
        if canonical(dist.metadata["Name"]) not in {"pip", "setuptools", "wheel"}
    }
    dev = pins("dev.txt")

    differing = {name: version for name, version in installed.items() if dev.get(name) != version}
    assert differing == {}, "the .venv is not requirements/dev.txt: remove .venv, run bin/test again"
