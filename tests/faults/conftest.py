"""A fault-run stack on the test database: web process, workers, fake judge."""

import pytest

from tests.faults.stack import Stack
from tests.support.servers import child_env
from tests.support.throwaway_servers import Redis


@pytest.fixture
def fault_stack(transactional_db, fake_llm, tmp_path):
    """Web process (in-memory channel layer, ORM broker) and a recorder; workers per scenario."""
    stack = Stack(child_env(), fake_llm, tmp_path)
    stack.start_web()
    yield stack
    stack.stop()


@pytest.fixture
def redis_fault_stack(transactional_db, fake_llm, tmp_path):
    """The same on a Redis of its own (broker, channel layer, cache), which the test may stop."""
    redis = Redis(tmp_path / "redis").start()
    stack = Stack(child_env(redis.url), fake_llm, tmp_path, redis=redis)
    stack.start_web()
    yield stack
    stack.stop()
    redis.remove()
