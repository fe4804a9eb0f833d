"""The WebSocket connections of users who may no longer listen are closed (scoring/realtime/access.py)."""

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model

from scoring.realtime import access
from tests.realtime.test_consumers import TIMEOUT_S, LoopbackCommunicator, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


def change(username: str, **fields) -> None:
    """Save the user as the admin does (a save, with its signals)."""
    user = get_user_model().objects.get(username=username)
    for name, value in fields.items():
        setattr(user, name, value)
    user.save()


async def closed_with(ws: LoopbackCommunicator) -> int | None:
    """The close code the server sent, skipping other messages; None if the socket stays open."""
    try:
        while (output := await ws.receive_output(TIMEOUT_S))["type"] != "websocket.close":
            pass
    except asyncio.TimeoutError:
        return None
    return output.get("code")


@pytest.mark.parametrize(
    ("fields", "by_proxy"),
    [({"is_active": False}, True), ({"is_active": False}, False), ({"is_staff": True}, True)],
)
def test_an_open_socket_is_closed_once_its_user_may_no_longer_sign_in(fields, by_proxy):
    if by_proxy:
        headers = [(b"x-forwarded-user", b"carol")]
    else:
        headers = [session_cookie("carol"), (b"host", b"localhost"), (b"origin", b"http://localhost")]

    async def scenario():
        ws = LoopbackCommunicator(headers)
        await ws.open()
        await database_sync_to_async(change)("carol", **fields)
        code = await closed_with(ws)
        again = await LoopbackCommunicator(headers).refused()
        return code, again

    code, refused_again = async_to_sync(scenario)()
    assert code == access.CLOSE_POLICY_VIOLATION
    assert refused_again


def test_a_session_user_made_staff_keeps_listening():
    """Only a proxy sign-in is undone by staff rights: a session is the account's own password."""
    headers = [session_cookie("carol"), (b"host", b"localhost"), (b"origin", b"http://localhost")]

    async def scenario():
        ws = LoopbackCommunicator(headers)
        await ws.open()
        await database_sync_to_async(change)("carol", is_staff=True)
        await asyncio.sleep(0.5)
        answer = await ws.request({"action": "ping"})
        await ws.disconnect()
        return answer

    assert async_to_sync(scenario)() == {"type": "pong"}


def test_a_change_saved_by_another_process_closes_the_socket_at_the_next_check(monkeypatch):
    """Another web process's save sends no signal here: the periodic check sees it."""
    monkeypatch.setattr(access, "CHECK_S", 0.2)

    async def scenario():
        ws = LoopbackCommunicator([(b"x-forwarded-user", b"dave")])
        await ws.open()
        # An UPDATE, as another process's save looks from here: no signal in this process.
        await database_sync_to_async(get_user_model().objects.filter(username="dave").update)(is_active=False)
        return await closed_with(ws)

    assert async_to_sync(scenario)() == access.CLOSE_POLICY_VIOLATION
