"""The in-memory channel layer (scoring.realtime.layers): channels' own, its sweep bounded."""

import asyncio

from scoring.realtime import layers


def run(scenario):
    return asyncio.run(scenario())


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
            await layer.send(member, {"type": "access.revoked"})
        for member in members:
            await layer.receive(member)

    run(scenario)
    assert len(sweeps) == 1
