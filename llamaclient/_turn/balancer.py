"""The pool's routing: which server and slot a request goes to, and which servers are up.

Pure bookkeeping, no I/O: the pool feeds it what ``/slots`` said and what its own requests
are doing, and asks it for a route. The expensive thing to lose is a session's prompt cache:

- A session stays on its server. It moves only when that server is down (``failover``), or
  when its own slot is busy with someone else's request while another server has a free slot
  (``slot busy``).
- A new session's server is chosen by rendezvous hashing with bounded load: the servers in
  the order of ``hash(session, server)`` (the server's name: its base URL), the first whose
  load (our requests in flight there) stays within ``(1 + epsilon)`` times the mean. So two
  processes, or a restarted one, put a session on the same server without sharing anything,
  and a server that leaves or joins moves only its own share of the sessions. A server whose
  ``/metrics`` show deferred requests is skipped while another has a free slot. A session
  new to this balancer that already has earlier turns (a restarted or second process's
  conversation) goes to its rendezvous server whatever the load, unpinned: its prompt cache
  is there. A request without a session goes to the server with the most free slots.
- While a server has no more sessions than slots, each session has a slot of its own, pinned
  (``id_slot``): its prompt stays in that slot's KV cache. Once it has more sessions than
  slots, its requests are not pinned: llama-server then picks the idle slot holding the
  longest common prefix, or saves the least recently used slot's prompt to its host-RAM
  prompt cache and loads the request's own from there. A pinned request never gets that
  (``server-context.cpp``: the RAM cache is only used when the server picks the slot), so
  pinning more sessions than slots loses caches: measured with 16 sessions on 3 servers x 2
  slots, 92 % reuse pinned against 100 % unpinned (docs/router-and-pool.md).
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Collection, Sequence
from typing import NamedTuple

from .._types.events import RoutedReason

__all__ = ["EPSILON", "MAX_SESSIONS", "RELEASE_GRACE", "Balancer", "Route", "ServerState", "weight"]

MAX_SESSIONS = 1 << 16  # sessions remembered; the least recently used is forgotten first
_BACKOFF_START = 0.5  # seconds a server that failed stays out, doubled on each new failure
_BACKOFF_CAP = 30.0
# llama-server frees a slot about one token step after a stream ends (~1 s after a cut
# connection): a look within this many seconds of our own request's end that still finds the
# slot processing is seeing that request's tail, not someone else's.
RELEASE_GRACE = 1.5
# Bounded load: a new session skips a server already over (1 + EPSILON) x the mean load
# (HAProxy's hash-balance-factor 125, Mirrokni et al.'s consistent hashing with bounded loads).
EPSILON = 0.25


def weight(session: str, server: str) -> int:
    """The rendezvous weight of ``server`` for ``session``: the same in every process."""
    digest = hashlib.blake2b(f"{session}\x00{server}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class Route(NamedTuple):
    """Where a request goes: server ``server`` (an index), pinned to ``slot``."""

    server: int
    slot: int | None
    reason: RoutedReason


class ServerState:
    """What the pool knows about one server: its slots, which are busy, whether it is up."""

    __slots__ = (
        "busy",
        "deferred",
        "down_until",
        "failures",
        "inflight",
        "owners",
        "released",
        "sessions",
        "slots",
    )

    def __init__(self) -> None:
        self.slots = 0  # 0: not known yet
        self.busy: frozenset[int] = frozenset()  # processing, as the last /slots look said
        self.inflight: dict[int | None, int] = {}  # slot (None: unpinned) -> our requests
        self.owners: set[int] = set()  # slots that a session has to itself
        self.sessions = 0  # sessions on this server
        self.released: dict[int, float] = {}  # slot -> when our last request on it ended
        self.down_until: float | None = None
        self.failures = 0
        self.deferred = 0  # requests the server had deferred, as its /metrics said (0: none)

    def up(self, now: float) -> bool:
        return self.down_until is None or now >= self.down_until

    def probing(self, now: float) -> bool:
        """Out after a failure, and its backoff is over: look at it before using it again."""
        return self.down_until is not None and now >= self.down_until

    def failed(self, now: float) -> None:
        self.failures += 1
        delay = min(_BACKOFF_START * 2 ** (self.failures - 1), _BACKOFF_CAP)
        self.down_until = now + delay

    def recovered(self) -> None:
        self.down_until = None
        self.failures = 0

    def saw(self, processing: Sequence[bool], now: float) -> None:
        """What ``GET /slots`` said at ``now``: one flag per slot. A slot our own request
        left less than ``RELEASE_GRACE`` ago counts as free."""
        self.slots = len(processing)
        self.busy = frozenset(
            i
            for i, busy in enumerate(processing)
            if busy and now - self.released.get(i, -RELEASE_GRACE) >= RELEASE_GRACE
        )

    @property
    def pins(self) -> bool:
        """Sessions here have slots of their own (no more sessions than slots)."""
        return 0 < self.sessions <= self.slots

    def slot_free(self, slot: int) -> bool:
        return not self.inflight.get(slot) and slot not in self.busy

    def free_slots(self) -> list[int]:
        """Free slots; unpinned requests of ours take the free ones first."""
        free = [s for s in range(self.slots) if self.slot_free(s)]
        return free[self.inflight.get(None, 0) :]

    def load(self) -> int:
        """Our requests in flight here (the queue we would join)."""
        return sum(self.inflight.values())

    def weight(self) -> int:
        """The load a new session weighs: our requests in flight here, or the slots the
        last look found busy (everyone's: other processes' requests too), the larger."""
        return max(self.load(), len(self.busy))


class _Session:
    __slots__ = ("asleep", "inflight", "last", "server", "slot")

    def __init__(self, server: int, slot: int | None) -> None:
        self.server = server
        self.slot = slot  # its own slot on that server, if it got one
        self.inflight = 0
        self.last = 0.0  # when its last request ended
        self.asleep = False  # its slot was saved to disk and given up (hibernation)


class Balancer:
    """Sessions, servers, and the choice of a route (``route``), then ``start``/``finish``
    around each request so the in-flight counts stay exact."""

    def __init__(
        self,
        n_servers: int,
        max_sessions: int = MAX_SESSIONS,
        names: Sequence[str] | None = None,
        epsilon: float = EPSILON,
    ) -> None:
        self.servers = [ServerState() for _ in range(n_servers)]
        self.names = list(names) if names is not None else [str(i) for i in range(n_servers)]
        self.epsilon = epsilon
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._max = max_sessions
        self._allowed: Collection[int] | None = None  # the servers of the current route()

    def session_server(self, session: str | None) -> int | None:
        """The server ``session`` is on, if known."""
        known = self._sessions.get(session) if session is not None else None
        return None if known is None else known.server

    def _pinned(self, known: _Session, slot: int | None) -> int | None:
        """The slot a request of ``known`` is pinned to: its own (``slot``) if given, else
        the session's own slot while its server pins."""
        if slot is not None:
            return slot
        return known.slot if self.servers[known.server].pins else None

    def needs_look(self, session: str | None, slot: int | None, now: float) -> bool:
        """Whether to look at the servers' ``/slots`` before routing: a new session, a
        server back from its backoff, or the session's pinned slot not known to be free."""
        if any(server.probing(now) for server in self.servers):
            return True
        known = self._sessions.get(session) if session is not None else None
        if known is None:
            return True
        pinned = self._pinned(known, slot)
        server = self.servers[known.server]
        return not server.up(now) or (pinned is not None and not server.slot_free(pinned))

    def route(
        self,
        session: str | None,
        slot: int | None,
        now: float,
        allowed: Collection[int] | None = None,
        *,
        continuing: bool = False,
    ) -> Route | None:
        """The route of a request (``slot``: the request's own, which wins) among the
        ``allowed`` servers (None: all), or None when none is up. Call :meth:`start` with it
        before any await. ``continuing``: the request carries earlier turns (an assistant
        message), so a session new to this balancer is a conversation another process (or
        this one, before a restart) placed: it goes to its rendezvous server, load bound or
        not, because its prompt cache is there, unpinned (see :meth:`_hashed`)."""
        self._allowed = allowed
        if session is None:
            return self._fresh(slot, now, "new session")
        known = self._sessions.get(session)
        if known is not None:
            self._sessions.move_to_end(session)
            if allowed is None or known.server in allowed:
                return self._sticky(known, slot, now, session)
        return self._hashed(session, slot, now, "new session", continuing=continuing)

    def _sticky(self, known: _Session, slot: int | None, now: float, session: str) -> Route | None:
        server = self.servers[known.server]
        if not server.up(now):
            return self._hashed(session, slot, now, "failover")
        pinned = self._pinned(known, slot)
        if known.inflight or pinned is None or slot is not None or server.slot_free(pinned):
            return Route(known.server, pinned, "sticky")
        moved = self._fresh(None, now, "slot busy", free_only=True, exclude=known.server)
        return moved or Route(known.server, pinned, "sticky")

    def _fresh(
        self,
        slot: int | None,
        now: float,
        reason: RoutedReason,
        *,
        free_only: bool = False,
        exclude: int | None = None,
    ) -> Route | None:
        """The server with the most free slots (then the fewest requests of ours, then the
        fewest sessions), and a slot of its own there if one is left; with ``free_only``,
        None if no slot is free."""
        best: tuple[int, int, int, int] | None = None
        allowed = self._allowed
        for index, server in enumerate(self.servers):
            if index == exclude or not server.up(now):
                continue
            if allowed is not None and index not in allowed:
                continue
            key = (len(server.free_slots()), -server.load(), -server.sessions, -index)
            if best is None or key > best:
                best = key
        if best is None or (free_only and best[0] == 0):
            return None
        index = -best[3]
        if slot is None:
            slot = self._own_slot(self.servers[index])
        return Route(index, slot, reason)

    def _hashed(
        self,
        session: str,
        slot: int | None,
        now: float,
        reason: RoutedReason,
        *,
        continuing: bool = False,
    ) -> Route | None:
        """A new (or moved) session's server: the highest rendezvous weight among the
        servers up and allowed, within the load bound, one whose ``/metrics`` show deferred
        requests only when no other has a free slot; and a slot of its own there, if one is
        left. A ``continuing`` conversation skips the bound and gets no slot of its own: its
        cache is on its rendezvous server, in whichever slot (or the host-RAM prompt cache)
        the server finds it."""
        candidates = self._candidates(now)
        if not candidates:
            return None
        order = sorted(candidates, key=lambda i: weight(session, self.names[i]), reverse=True)
        if continuing:
            return Route(order[0], slot, reason)
        index = self._within(order)[0]
        if slot is None:
            slot = self._own_slot(self.servers[index])
        return Route(index, slot, reason)

    def _within(self, order: list[int]) -> list[int]:
        """``order``'s servers within the load bound (all, if none is), those without
        deferred requests first while one of them has a free slot."""
        servers = self.servers
        total = sum(servers[i].weight() for i in order) + 1  # this one too
        bound = math.ceil((1 + self.epsilon) * total / len(order))
        within = [i for i in order if servers[i].weight() + 1 <= bound] or order
        if any(servers[i].free_slots() for i in within if not servers[i].deferred):
            within = [i for i in within if not servers[i].deferred] or within
        return within

    def _candidates(self, now: float) -> list[int]:
        allowed = self._allowed
        return [
            i
            for i, server in enumerate(self.servers)
            if server.up(now) and (allowed is None or i in allowed)
        ]

    @staticmethod
    def _own_slot(server: ServerState) -> int | None:
        """A free slot no session has (else any such slot), or None: the server picks."""
        if server.sessions >= server.slots:
            return None  # slots not known, or every slot has its session
        unowned = [s for s in range(server.slots) if s not in server.owners]
        free = [s for s in unowned if server.slot_free(s)]
        return (free or unowned)[0]

    def start(self, session: str | None, route: Route) -> None:
        """A request goes out on ``route``: count it, and (re)place its session there."""
        server = self.servers[route.server]
        server.inflight[route.slot] = server.inflight.get(route.slot, 0) + 1
        if session is None:
            return
        known = self._sessions.get(session)
        if known is None or known.server != route.server:
            inflight = 0
            if known is not None:
                inflight = known.inflight
                self._leave(known)
            own = route.slot if route.slot not in server.owners else None
            known = self._sessions[session] = _Session(route.server, own)
            known.inflight = inflight
            server.sessions += 1
            if own is not None:
                server.owners.add(own)
            self._forget_oldest()
        known.inflight += 1

    def finish(self, session: str | None, route: Route, now: float) -> None:
        """The request on ``route`` ended at ``now``."""
        server = self.servers[route.server]
        if route.slot is not None:
            server.released[route.slot] = now
        count = server.inflight.get(route.slot, 0) - 1
        if count > 0:
            server.inflight[route.slot] = count
        else:
            server.inflight.pop(route.slot, None)
        known = self._sessions.get(session) if session is not None else None
        if known is not None and known.inflight:
            known.inflight -= 1
        if known is not None:
            known.last = now

    # -- hibernation: idle sessions give their slot up, saved to disk -------------------------
    def idle(self, now: float, after: float) -> list[tuple[str, int, int]]:
        """``(session, server, slot)`` of each session with a slot of its own and nothing in
        flight whose last request ended ``after`` seconds before ``now`` or earlier."""
        return [
            (name, known.server, known.slot)
            for name, known in self._sessions.items()
            if known.slot is not None and not known.inflight and now - known.last >= after
        ]

    def sleep(self, session: str) -> None:
        """``session``'s slot was saved and erased: it is free for another session."""
        known = self._sessions[session]
        server = self.servers[known.server]
        if known.slot is not None:
            server.owners.discard(known.slot)
        if not known.asleep:
            server.sessions -= 1  # not one of the server's sessions while it sleeps
        known.slot, known.asleep = None, True

    def wake(self, session: str | None, route: Route) -> tuple[Route, bool]:
        """``route`` for a hibernated ``session`` pinned to a slot of its own again (where
        one is free), and whether its saved prompt is to be restored into it."""
        known = self._sessions.get(session) if session is not None else None
        if known is None or not known.asleep or known.server != route.server:
            return route, False
        known.asleep = False
        server = self.servers[route.server]
        slot = route.slot if route.slot is not None else self._own_slot(server)
        server.sessions += 1
        if slot is None:
            return route, False
        known.slot = slot
        server.owners.add(slot)
        return route._replace(slot=slot), True

    def _leave(self, known: _Session) -> None:
        server = self.servers[known.server]
        if not known.asleep:
            server.sessions -= 1
        if known.slot is not None:
            server.owners.discard(known.slot)

    def _forget_oldest(self) -> None:
        while len(self._sessions) > self._max:
            _, oldest = self._sessions.popitem(last=False)
            self._leave(oldest)
