"""The in-memory channel layer (scoring.realtime.layers): channels' own, its sweep bounded."""

import asyncio

from scoring.realtime import layers


def run(scenario):
    return asyncio.run(scenario())


def test_a_group_message_reaches_every_member_once_as_its_own_copy():
    async def scenario():
        layer = layers.InMemoryChannelLayer()
        members = [await layer.new_channel() for _ in range(3)]
        for member in members:
            await layer.group_add("scoring.sessions", member)
        message = {"type": "scoring.event", "event": {"id": 7}}
        await layer.group_send("scoring.sessions", message)
        received = [await layer.receive(member) for member in members]
        waiting = [layer.channels.get(member) for member in members]
        return message, received, waiting

    message, received, waiting = run(scenario)
    assert received == [message] * 3
    assert all(copy is not message for copy in received)
    assert waiting == [None, None, None]  # nothing left queued


def test_a_full_member_misses_the_message_and_the_others_get_it():
    async def scenario():
        layer = layers.InMemoryChannelLayer(capacity=1)
        full, other = await layer.new_channel(), await layer.new_channel()
        for member in (full, other):
            await layer.group_add("scoring.sessions", member)
        await layer.send(full, {"type": "first"})
        await layer.group_send("scoring.sessions", {"type": "second"})
        return [await layer.receive(full), await layer.receive(other)]

    assert run(scenario) == [{"type": "first"}, {"type": "second"}]


def test_expired_messages_and_their_channels_memberships_are_still_swept(monkeypatch):
    async def scenario():
        layer = layers.InMemoryChannelLayer(expiry=0)
        gone, staying = await layer.new_channel(), await layer.new_channel()
        for member in (gone, staying):
            await layer.group_add("scoring.sessions", member)
        await layer.send(gone, {"type": "never read"})
        await asyncio.sleep(0.01)
        layer.next_sweep = 0.0  # the sweep interval is over
        await layer.group_send("scoring.sessions", {"type": "next"})
        return set(layer.groups["scoring.sessions"]), staying

    members, staying = run(scenario)
    assert members == {staying}


def test_a_sweep_runs_at_most_once_an_interval(monkeypatch):
    sweeps = []
    monkeypatch.setattr(layers.layers.InMemoryChannelLayer, "_clean_expired", lambda self: sweeps.append(1))

    async def scenario():
        layer = layers.InMemoryChannelLayer()
        members = [await layer.new_channel() for _ in range(50)]
        for member in members:
            await layer.group_add("scoring.sessions", member)
        await layer.group_send("scoring.sessions", {"type": "scoring.event"})
        for member in members:
            await layer.receive(member)

    run(scenario)
    assert len(sweeps) == 1
