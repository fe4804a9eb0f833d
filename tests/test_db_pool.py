"""PostgreSQL connections come from a per-process pool (settings: DB_POOL_*)."""

import multiprocessing
import threading

import pytest
from django.db import close_old_connections, connection

from scoring.judge import llm

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("the pool is PostgreSQL's")


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def client_backends() -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend'")
        return {row[0] for row in cursor.fetchall()}


def test_connections_closed_by_threads_are_reused_by_the_next_ones():
    connection.pool.wait()  # opened, with its minimum of connections
    connection.close()
    open_before = client_backends()
    connection.close()
    pids = []

    def query_like_a_request_or_a_judge_job():
        pids.append(backend_pid())
        llm.release_db_connection()  # what a judge job does while it waits on the LLM
        pids.append(backend_pid())
        close_old_connections()  # what Django does at the end of each request
        connection.close()

    for _ in range(10):  # each ASGI request's sync code runs in a thread of its own
        thread = threading.Thread(target=query_like_a_request_or_a_judge_job)
        thread.start()
        thread.join()

    # Without the pool each thread would have opened connections of its own.
    assert set(pids) <= open_before


def _child_backend_pid(pipe) -> None:
    pipe.send(backend_pid())
    pipe.close()


def test_a_forked_process_opens_its_own_connections():
    # django-q2 forks its worker processes from processes that used the database.
    backend_pid()
    before_fork = client_backends()
    connection.close()
    parent_end, child_end = multiprocessing.Pipe()
    child = multiprocessing.get_context("fork").Process(target=_child_backend_pid, args=(child_end,))
    child.start()
    child_pid = parent_end.recv()
    child.join(timeout=30)

    assert child.exitcode == 0
    assert child_pid not in before_fork
    assert backend_pid() in before_fork  # the parent's pooled connections still work
