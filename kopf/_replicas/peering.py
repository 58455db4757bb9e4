"""
Replicas of one operator: high availability and sharding over ``coordination.k8s.io/v1`` Leases.

**HA** (``mode='ha'``): one Lease; its holder is the leader and handles all
objects, the other replicas poll it and take it over once it has expired or
been released. **Shards** (``mode='shards'``): every replica holds a Lease of
its own (a *member Lease*, labelled with the operator's name); the live
members share the objects by rendezvous hashing (:mod:`.ownership`).

Time is judged as Kubernetes' controllers do it ("renew-time semantics"): a
replica never compares another machine's timestamps with its own clock. A
Lease counts as expired when its record has not changed for its
``leaseDurationSeconds`` *as measured locally since this replica saw it
change*. A holder measures from the moment it *sent* its last successful
renewal, which precedes any observation of it, so only the clocks' rates
must agree, not their readings.

The holder's own deadlines (the fences, applied by :class:`.fencing.Gate`):

* ``renew_deadline - retry_period`` after the last renewal: the soft fence --
  no new handling cycles, and the cycles that have not begun to patch are
  cancelled;
* ``renew_deadline``: the hard fence -- every cycle is cancelled, no write is
  sent;
* ``lease_duration``: only now may another replica regard the Lease as expired.

**Fencing of shard hand-overs.** Each member publishes, in its Lease, the
ring (member list) it handles by. A member handles an object only if (1) its
published ring gives the object to it, and (2) no other live member's
published ring gives the object to that member -- judged by a listing of the
Leases read *after* its own ring was published. A member that adopts a new
ring first stops handling the objects the new ring takes away (it waits for
their running cycles to finish), and only then publishes the ring. Two
members cannot both pass (2) for one object: whichever published its ring
later has read the other's ring after that one was published, and yields.
An expired member has stopped handling by its hard fence before its Lease
expires. Hence an object is never handled by two replicas at once, and since
all progress lives in the object, the next owner continues where the
previous one stopped.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import os
import re
import secrets
import socket
import sys
import threading
from collections.abc import AsyncIterator, Collection, Iterator, Sequence
from pathlib import Path

import aiohttp

from kopf import errors
from kopf._kube import access
from kopf._kube.auth import APIContext
from kopf._kube.errors import APIConflictError, APIConnectionError, APIError, APIForbiddenError, APINotFoundError
from kopf._replicas import freezing, leases, ownership
from kopf._replicas.fencing import Gate, everything, nothing
from kopf._replicas.leases import Lease, LeaseSpec
from kopf._replicas.ownership import Ring, ShardPermit
from kopf._structs.clocks import SYSTEM_CLOCK, Clock
from kopf._structs.namespaces import NamespaceSpec, is_exact
from kopf.config import PeeringConfig

logger = logging.getLogger('kopf._replicas.peering')

MEMBER_LABEL = freezing.SHARDS_LABEL  # on member Leases: the operator's peering name
RING_ANNOTATION = 'kopf.dev/ring'  # on member Leases: the ring the member handles by
INSTANCE_ANNOTATION = 'kopf.dev/instance'  # on Leases we hold: which process of the identity writes them

# The Lease verbs each mode needs; the documented RBAC (docs/install.rst) grants exactly their union.
VERBS = {
    'ha': ('get', 'create', 'update'),
    'shards': ('list', 'create', 'update', 'delete'),
}

_NAME_RE = re.compile(r'^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')
MAX_NAME_LENGTH = 63  # the name is also a label value

# Transient failures of one request: the loop tries again in the next period.
_TRANSIENT = (APIError, APIConnectionError, aiohttp.ClientError, asyncio.TimeoutError)


class PeeringError(Exception):
    """Replicas cannot coordinate (e.g. RBAC forbids the Lease verbs); the message says what to do."""


# Settings.

@dataclasses.dataclass(frozen=True)
class PeeringSettings:
    """The resolved, validated peering settings of one running replica."""

    mode: str
    name: str
    namespace: str
    identity: str
    lease_duration: int
    renew_deadline: float
    retry_period: float
    priority: int = 0

    @property
    def soft_fence(self) -> float:
        return self.renew_deadline - self.retry_period

    @property
    def request_timeout(self) -> float:
        return self.renew_deadline - self.retry_period

    @property
    def member_lease_name(self) -> str:
        return f'{self.name}-{self.identity}'[:253].rstrip('-.')


def sanitize(text: str) -> str:
    """Lowercase letters, digits and dashes only, as in the names of Kubernetes objects."""
    return re.sub(r'-+', '-', re.sub(r'[^a-z0-9-]', '-', text.lower())).strip('-')


def default_name(sources: Sequence[str] = ()) -> str:
    """A Lease name from the operator's files or modules (``kopf run op.py`` gives ``kopf-op``)."""
    if not sources:
        main = getattr(sys.modules.get('__main__'), '__file__', None)
        sources = [main] if main else []
    stems = [sanitize(Path(source).stem if source.endswith('.py') else source) for source in sources]
    name = '-'.join(['kopf', *[stem for stem in stems if stem]])
    return name[:MAX_NAME_LENGTH].rstrip('-')


def default_identity() -> str:
    """The host name (in a pod: the pod's name) and a random suffix, unique per process."""
    host = sanitize(socket.gethostname())[:48] or 'kopf'
    return f'{host}-{os.getpid()}-{secrets.token_hex(3)}'


def resolve(
        config: PeeringConfig,
        *,
        namespaces: Collection[NamespaceSpec],
        clusterwide: bool,
        default_namespace: str | None,
) -> PeeringSettings:
    """Fill in the defaults and check everything, naming the setting that is wrong."""
    try:
        config.validate()
    except ValueError as e:
        raise PeeringError(str(e)) from None
    name = config.name if config.name is not None else default_name()
    identity = config.identity if config.identity is not None else default_identity()
    for what, value in [('name', name), ('identity', identity)]:
        if len(value) > MAX_NAME_LENGTH or not _NAME_RE.match(value):
            raise PeeringError(
                f"The peering {what} {value!r} cannot be used in Lease names: use at most {MAX_NAME_LENGTH} "
                f"lowercase letters, digits, '-' and '.', starting and ending with a letter or digit "
                f"(--lease-name/--identity, or config.peering.{what}).")
    namespace = lease_namespace(config.namespace, namespaces=namespaces, clusterwide=clusterwide,
                                default_namespace=default_namespace)
    return PeeringSettings(mode=config.mode, name=name, namespace=namespace, identity=identity,
                           lease_duration=config.lease_duration, renew_deadline=config.renew_deadline,
                           retry_period=config.retry_period, priority=config.priority)


def lease_namespace(
        explicit: str | None,
        *,
        namespaces: Collection[NamespaceSpec],
        clusterwide: bool,
        default_namespace: str | None,
) -> str:
    """
    Where the Leases are: as given, else the one served namespace, else the credentials' one, else default.

    A namespace pattern (``-n 'myapp-*'``) names no namespace of its own: the
    credentials' namespace (in a pod, the operator's own) is taken then.
    """
    if explicit is not None:
        return explicit
    if len(namespaces) == 1 and not clusterwide:
        namespace = next(iter(namespaces))
        if isinstance(namespace, str) and is_exact(namespace):
            return namespace
    return default_namespace or 'default'


# The fences.

class _Fences:
    """
    The deadlines that follow from the last successful renewal.

    The gate checks them by the clock at every admission and write; the
    timers here only cancel the running cycles at those moments and say so.
    """

    def __init__(self, gate: Gate, settings: PeeringSettings, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.gate = gate
        self.settings = settings
        self.clock = clock
        self.renewed_at: float | None = None
        self._timers: list[asyncio.TimerHandle] = []

    @property
    def lost(self) -> bool:
        """Whether the renew deadline has passed since the last renewal (if there was one)."""
        return self.renewed_at is not None and self.clock.monotonic() >= self.renewed_at + self.settings.renew_deadline

    def renewed(self, sent_at: float) -> None:
        """A renewal sent at this (monotonic) time has succeeded."""
        self.cancel()
        self.renewed_at = sent_at
        self.gate.extend(admit_until=sent_at + self.settings.soft_fence,
                         write_until=sent_at + self.settings.renew_deadline)
        loop = asyncio.get_running_loop()
        now = self.clock.monotonic()  # the timers count on the loop's clock, the deadlines on ours
        self._timers = [
            loop.call_later(max(0.0, sent_at + self.settings.soft_fence - now), self._soften),
            loop.call_later(max(0.0, sent_at + self.settings.renew_deadline - now), self._harden),
        ]

    def cancel(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers = []

    def _soften(self) -> None:
        cancelled = self.gate.soften()
        logger.warning("The lease has not been renewed for %.1fs; no new handling (%d cycle(s) cancelled).",
                       self.settings.soft_fence, cancelled)

    def _harden(self) -> None:
        self.gate.harden()
        logger.error("The lease has not been renewed within the renew deadline of %.1fs: stopped handling "
                     "before it can expire (in %.1fs) and another replica takes over; trying to renew it.",
                     self.settings.renew_deadline, self.settings.lease_duration - self.settings.renew_deadline)


# Observations of other replicas' Leases, by renew-time semantics.

class _Observations:
    """When each Lease's record was last seen changing, by this replica's monotonic clock."""

    def __init__(self, default_duration: int) -> None:
        self.default_duration = default_duration
        self._seen: dict[str, tuple[str, float]] = {}
        self._changing: set[str] = set()  # seen in more than one version: someone writes them

    def observe(self, lease: Lease, now: float) -> None:
        previous = self._seen.get(lease.name)
        if previous is None or previous[0] != lease.resource_version:
            self._seen[lease.name] = (lease.resource_version, now)
        if previous is not None and previous[0] != lease.resource_version:
            self._changing.add(lease.name)

    def changing(self, lease: Lease) -> bool:
        """Whether the Lease was written while we watched: its writer was alive after we first saw it."""
        return lease.name in self._changing

    def seen_at(self, lease: Lease) -> float | None:
        """When this version of the Lease was first seen (monotonic), if it was."""
        seen = self._seen.get(lease.name)
        return seen[1] if seen is not None and seen[0] == lease.resource_version else None

    def forget_others(self, names: Collection[str]) -> None:
        self._seen = {name: seen for name, seen in self._seen.items() if name in names}
        self._changing &= set(names)

    def expired(self, lease: Lease, now: float) -> bool:
        """Released, or unchanged for its whole duration since we saw it change."""
        if not lease.spec.holder:
            return True
        seen = self._seen.get(lease.name)
        if seen is None or seen[0] != lease.resource_version:
            return False
        duration = lease.spec.duration if lease.spec.duration is not None else self.default_duration
        return now - seen[1] >= duration


# Duplicate identities.

class Namesake(enum.Enum):
    """How a Lease held under our own identity stands (see :func:`namesake`)."""

    OURS = 'ours'  # written by this very process
    ALIVE = 'alive'  # another process writes it under our identity: a duplicate
    UNKNOWN = 'unknown'  # another process's, not seen written yet: a duplicate, or a predecessor that has ended
    GONE = 'gone'  # another process's, expired: a predecessor that has ended (e.g. a restarted pod)


def namesake(lease: Lease, *, instance: str, observations: _Observations, now: float) -> Namesake:
    """
    Who holds a Lease that names our identity as its holder: this process, a duplicate, or a predecessor.

    Every process writes a random instance token of its own into the Leases
    it holds, so a Lease under our identity without our token is another
    process's. It is a live duplicate once we have seen it written (it
    changed while we watched); a predecessor with our identity that has
    ended (a restarted pod with a stable name) leaves it unchanged until it
    expires by renew-time semantics -- until then, we cannot tell the two
    apart, and wait. ``now`` is this replica's monotonic time.
    """
    if lease.annotations.get(INSTANCE_ANNOTATION) == instance:
        return Namesake.OURS
    if observations.changing(lease):
        return Namesake.ALIVE
    if observations.expired(lease, now):
        return Namesake.GONE
    return Namesake.UNKNOWN


def duplicate_error(settings: PeeringSettings, lease: Lease) -> PeeringError:
    return PeeringError(
        f"Another replica runs with the identity {settings.identity!r}: the lease {lease.namespace}/{lease.name} "
        f"is renewed under this identity by another process, so this replica does not join. Give each replica "
        f"a unique --identity (config.peering.identity), or leave it to the default (the host name, the process "
        f"id and a random suffix).")


# The modes.

class _Replica:
    """What both modes share: the loop, the gate, the fences, and the fatal errors."""

    mode: str

    def __init__(
            self,
            *,
            context: APIContext,
            gate: Gate,
            settings: PeeringSettings,
            clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.context = context
        self.gate = gate
        self.settings = settings
        self.clock = clock
        self.fences = _Fences(gate, settings, clock=clock)
        self.observations = _Observations(settings.lease_duration)
        self.instance = secrets.token_hex(8)  # this process among those that may share the identity
        self.closing = False
        self.waiting_for: str | None = None  # a Lease under our identity, of another process: logged once

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                await self.tick()
            except _TRANSIENT as e:
                logger.warning("Cannot coordinate through the lease(s) in %r right now: %s; retrying.",
                               self.settings.namespace, errors.describe(e))
            await asyncio.sleep(max(0.0, started + self.settings.retry_period - loop.time()))

    async def tick(self) -> None:
        raise NotImplementedError

    async def release(self) -> None:
        raise NotImplementedError

    async def step_down(self, *, timeout: float) -> bool:
        """Stop handling for good (the operator is stopping); wait for the running cycles while still renewing."""
        self.closing = True
        self.gate.permit(nothing, resync=False)
        return await self.gate.drain(nothing, timeout=timeout)

    @contextlib.contextmanager
    def verb(self, verb: str) -> Iterator[None]:
        """Turn a 403 of a Lease request into a fatal error that names the verb and the resource."""
        try:
            yield
        except APIForbiddenError as e:
            raise PeeringError(
                f"RBAC forbids to {verb} {leases.RESOURCE} in the namespace {self.settings.namespace!r} "
                f"({e}). Replicas with --{self.mode} need the verbs {', '.join(VERBS[self.mode])} on "
                f"{leases.RESOURCE} (see the Role in docs/install.rst).") from None

    @property
    def timeout(self) -> float:
        return self.settings.request_timeout

    def judge_namesake(self, lease: Lease, now: float) -> Namesake:
        """Judge a Lease held under our identity; refuse to go on if a duplicate writes it."""
        verdict = namesake(lease, instance=self.instance, observations=self.observations, now=now)
        if verdict is Namesake.ALIVE:
            raise duplicate_error(self.settings, lease)
        if verdict is Namesake.UNKNOWN and self.waiting_for != lease.name:
            self.waiting_for = lease.name
            duration = lease.spec.duration or self.settings.lease_duration
            logger.warning("The lease %s/%s is held under our identity %r by another process: waiting up to %ss "
                           "for it to expire (a previous process of this identity that has ended) -- or to be "
                           "renewed (another replica with the same identity: this one then exits).",
                           lease.namespace, lease.name, self.settings.identity, duration)
        if verdict is Namesake.GONE:
            logger.info("The lease %s/%s of a previous process with our identity %r has expired; taking it over.",
                        lease.namespace, lease.name, self.settings.identity)
        return verdict


class _Elector(_Replica):
    """
    HA: one Lease, one leader; the others stand by and take over when it expires or is released.

    A replica of a higher priority than the holder's takes the Lease over at
    once, but handles only when the previous holder has surely stopped (see
    :mod:`.freezing`, which also explains frozen Leases).
    """

    mode = 'ha'

    def __init__(
            self,
            *,
            context: APIContext,
            gate: Gate,
            settings: PeeringSettings,
            clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(context=context, gate=gate, settings=settings, clock=clock)
        self.lease: Lease | None = None  # as last seen
        self.leading = False
        self.leader: str | None = None  # as last logged
        self.holding_until: float | None = None  # ours after a takeover, but no handling before then

    async def tick(self) -> None:
        if self.fences.lost:
            self.leading = False
        if self.leading and self.lease is not None:
            try:
                await self._write(self.lease, acquire=False)
                return
            except APIConflictError:
                logger.debug("The lease has changed meanwhile; reading it again.")
            except APINotFoundError:
                self.lease = None
        with self.verb('get'):
            lease = await leases.read_lease(context=self.context, namespace=self.settings.namespace,
                                            name=self.settings.name, timeout=self.timeout)
        now = self.clock.monotonic()
        if lease is None:
            self._stand_by(None)
            await self._create()
            return
        self.lease = lease
        self.observations.observe(lease, now)
        verdict = self.judge_namesake(lease, now) if lease.spec.holder == self.settings.identity else None
        if verdict is Namesake.OURS:
            await self._write(lease, acquire=False)
        elif verdict is Namesake.UNKNOWN:
            self._stand_by(lease, quiet=True)
        elif verdict is Namesake.GONE and not self.closing:
            await self._write(lease, acquire=True)
        elif self._free(lease, now) and not self.closing:
            await self._write(lease, acquire=True)
        elif self.settings.priority > freezing.priority_of(lease) and not self.closing:
            await self._write(lease, acquire=True, preempt=True)
        else:
            self._stand_by(lease)

    def _free(self, lease: Lease, now: float) -> bool:
        """
        Released, expired, or a freeze that is over.

        A freeze is over when its lifetime has passed by the wall clock, but
        only after a whole Lease duration since we saw it begin: the leader
        from before the freeze has stopped by then.
        """
        if self.observations.expired(lease, now):
            return True
        freeze = freezing.Freeze.from_lease(lease)
        seen = self.observations.seen_at(lease)
        if freeze is None or seen is None or not freezing.lapsed(lease):
            return False
        return now - seen >= max(self.settings.lease_duration, freeze.previous_duration or 0)

    def _annotations(self, lease: Lease | None) -> dict[str, str]:
        """What we write into the Lease besides the spec: our priority and instance; a freeze's record goes away."""
        kept = {k: v for k, v in (lease.annotations if lease is not None else {}).items()
                if k not in (freezing.PRIORITY_ANNOTATION, freezing.FREEZE_ANNOTATION)}
        return {**kept, freezing.PRIORITY_ANNOTATION: str(self.settings.priority), INSTANCE_ANNOTATION: self.instance}

    async def _create(self) -> None:
        if self.closing:
            return
        stamp = leases.now()
        sent = self.clock.monotonic()
        spec = LeaseSpec(holder=self.settings.identity, duration=self.settings.lease_duration,
                         acquired=stamp, renewed=stamp)
        try:
            with self.verb('create'):
                lease = await leases.create_lease(context=self.context, namespace=self.settings.namespace,
                                                  name=self.settings.name, spec=spec, timeout=self.timeout,
                                                  annotations=self._annotations(None))
        except APIConflictError:
            logger.debug("Another replica has created the lease first.")
            return
        self._lead(lease, sent)

    async def _write(self, lease: Lease, *, acquire: bool, preempt: bool = False) -> None:
        """Renew the lease (ours) or take it over (free, or of a lower priority); a 409: someone was faster."""
        stamp = leases.now()
        sent = self.clock.monotonic()
        spec = LeaseSpec(holder=self.settings.identity, duration=self.settings.lease_duration,
                         acquired=stamp if acquire else lease.spec.acquired or stamp, renewed=stamp,
                         transitions=lease.spec.transitions + (1 if acquire else 0))
        try:
            with self.verb('update'):
                renewed = await leases.replace_lease(lease=lease, context=self.context, spec=spec,
                                                     annotations=self._annotations(lease), timeout=self.timeout)
        except APIConflictError:
            if self.leading:
                raise
            logger.debug("Another replica has changed the lease first.")
            return
        freeze = freezing.Freeze.from_lease(lease)
        holding_until = None
        if preempt:
            holding_until = freezing.hold_until(lease, taken_at=self.clock.monotonic(),
                                                seen_at=self.observations.seen_at(lease),
                                                own_duration=self.settings.lease_duration)
            wait = max(0.0, holding_until - self.clock.monotonic())
            what = freeze.describe() if freeze is not None else f"held by {lease.spec.holder}"
            logger.info("Took over the lease %s/%s (%s) with a higher priority (%d > %d); handling %s.",
                        lease.namespace, lease.name, what, self.settings.priority, freezing.priority_of(lease),
                        f"in {wait:.0f}s, when the previous leader has surely stopped" if wait else "now")
        elif acquire and freeze is not None:
            logger.info("Took over the lease %s/%s: the freeze is over (%s).", lease.namespace, lease.name,
                        freeze.describe())
        elif acquire and lease.spec.holder:
            logger.info("Took over the lease %s/%s from %s: not renewed for %ss.",
                        lease.namespace, lease.name, lease.spec.holder, lease.spec.duration)
        elif acquire:
            logger.info("Took over the lease %s/%s: released by its previous holder.", lease.namespace, lease.name)
        self._lead(renewed, sent, holding_until=holding_until)

    def _lead(self, lease: Lease, sent: float, *, holding_until: float | None = None) -> None:
        self.lease = lease
        self.observations.observe(lease, self.clock.monotonic())
        self.fences.renewed(sent)
        if self.closing:
            return
        if holding_until is not None:
            self.holding_until = holding_until
        if self.holding_until is not None:
            if self.clock.monotonic() < self.holding_until:
                return  # the lease is ours, but the previous holder may still be handling
            self.holding_until = None
        if not self.leading:
            logger.info("Leading as %s: the lease %s/%s is ours; handling the objects.",
                        self.settings.identity, lease.namespace, lease.name)
        if not self.leading or not self.gate.active:
            self.leading = True
            self.leader = self.settings.identity
            self.gate.permit(everything, resync=True)

    def _stand_by(self, lease: Lease | None, *, quiet: bool = False) -> None:
        holder = lease.spec.holder if lease is not None else None
        freeze = freezing.Freeze.from_lease(lease)
        if self.leading or self.holding_until is not None:
            if self.leading:
                self._log_pause(lease, holder)
            self.leading = False
            self.holding_until = None
            self.fences.cancel()
            self.gate.harden()
        if holder is not None and holder != self.leader and not quiet:
            if freeze is not None:
                logger.info("Standing by: the lease %s/%s is %s.", self.settings.namespace, self.settings.name,
                            freeze.describe())
            else:
                logger.info("Standing by: %s leads (the lease %s/%s).", holder, self.settings.namespace,
                            self.settings.name)
        self.leader = holder

    def _log_pause(self, lease: Lease | None, holder: str | None) -> None:
        freeze = freezing.Freeze.from_lease(lease)
        priority = freezing.priority_of(lease)
        if lease is not None and freeze is not None:
            logger.info("Paused: the lease is %s for %ss: stopped handling until `kopf resume` or the end of "
                        "the freeze.", freeze.describe(), lease.spec.duration)
        elif priority > self.settings.priority:
            logger.info("Paused: %s with a higher priority (%d > %d) has taken the lease over: stopped handling.",
                        holder, priority, self.settings.priority)
        else:
            logger.error("The lease is held by %s now: stopped handling.", holder or 'nobody')

    async def release(self) -> None:
        """Give the lease up at once, so that a standby takes over in one retry period, not one lease duration."""
        self.fences.cancel()
        self.gate.harden()
        if (not self.leading and self.holding_until is None) or self.lease is None:
            return
        spec = LeaseSpec(holder=None, duration=1, acquired=self.lease.spec.acquired, renewed=leases.now(),
                         transitions=self.lease.spec.transitions)
        try:
            await leases.replace_lease(lease=self.lease, context=self.context, spec=spec, timeout=self.timeout)
        except _TRANSIENT as e:
            logger.warning("Cannot release the lease %s/%s: %s; the standbys take over when it expires.",
                           self.settings.namespace, self.settings.name, errors.describe(e))
            return
        self.leading = False
        self.holding_until = None
        logger.info("Released the lease %s/%s.", self.settings.namespace, self.settings.name)


class _Member(_Replica):
    """Shards: a member Lease of our own; the live members' rings decide what we handle."""

    mode = 'shards'

    def __init__(
            self,
            *,
            context: APIContext,
            gate: Gate,
            settings: PeeringSettings,
            clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(context=context, gate=gate, settings=settings, clock=clock)
        self.lease: Lease | None = None  # our own, as last seen
        self.adopted: Ring = ()  # what we handle by, or are moving to once published
        self.published: Ring | None = None  # what the server has in our lease
        self.permitted: tuple[Ring, dict[Ring, frozenset[str]]] | None = None  # what the gate permits by
        self.live_others: frozenset[str] = frozenset()  # the other live members, as of the last listing

    @property
    def labels(self) -> dict[str, str]:
        return {MEMBER_LABEL: self.settings.name}

    async def tick(self) -> None:
        if self.fences.lost:
            self._reset()
        with self.verb('list'):
            listed = await leases.list_leases(context=self.context, namespace=self.settings.namespace,
                                              labels=self.labels, timeout=self.timeout)
        now = self.clock.monotonic()
        own_name = self.settings.member_lease_name
        self.observations.forget_others([lease.name for lease in listed])
        others: dict[str, Ring] = {}
        waiting = False  # our lease exists, but another process of our identity may still hold it
        for lease in listed:
            self.observations.observe(lease, now)
            if lease.name == own_name:
                if lease.spec.holder == self.settings.identity:
                    waiting = self.judge_namesake(lease, now) is Namesake.UNKNOWN
                    self.lease = None if waiting else lease
            elif self.observations.expired(lease, now):
                await self._collect(lease)
            elif lease.spec.holder:
                others[lease.spec.holder] = ownership.parse_ring(lease.annotations.get(RING_ANNOTATION))
        if self.lease is not None and own_name not in {lease.name for lease in listed}:
            self._lose("Our member lease is gone (the others took it for expired)")
        self.live_others = frozenset(others)
        if waiting:
            return

        if not self.closing:
            view = ownership.make_ring([*others, self.settings.identity])
            self._permit(others, view)
            if view != self.adopted and await self._let_go(view):
                self.adopted = view
                logger.info("Shard members (%d): %s; adopted the ring %s.", len(view), ', '.join(view),
                            ownership.ring_version(view))
        await self._renew()

    def _permit(self, others: dict[str, Ring], view: Ring) -> None:
        """
        Permit by the ring we published before this listing, minus what the others' rings claim.

        While moving to a new ring (``view``), only what both rings give us.
        A listing may bring objects that were not ours before (changed rings
        of ours or of the others): then the streams list the objects anew.
        """
        ring = self.published if self.published is not None else ()
        permit = ShardPermit(self.settings.identity, ring, others, keep=view if view != ring else None)
        inputs = (permit.ring, dict(permit.claims))
        gained = inputs != self.permitted
        self.permitted = inputs
        self.gate.permit(permit if ring else nothing, resync=gained)

    async def _let_go(self, view: Ring) -> bool:
        """Wait for the running cycles of the objects that the new ring takes away; ``True`` if none is left."""
        identity = self.settings.identity
        released = await self.gate.drain(lambda key: ownership.owner(key, view) == identity,
                                         timeout=self.settings.retry_period)
        if not released:
            logger.debug("Waiting for the cycles of the objects that move away to finish.")
        return released

    async def _renew(self) -> None:
        """Publish our ring in our lease (creating it if needed); from now on the others see it."""
        ring = (self.published or ()) if self.closing else self.adopted
        stamp = leases.now()
        sent = self.clock.monotonic()
        annotations = {RING_ANNOTATION: ownership.format_ring(ring), INSTANCE_ANNOTATION: self.instance}
        spec = LeaseSpec(holder=self.settings.identity, duration=self.settings.lease_duration,
                         acquired=self.lease.spec.acquired if self.lease is not None else stamp, renewed=stamp)
        try:
            if self.lease is None:
                if self.closing:
                    return
                with self.verb('create'):
                    lease = await leases.create_lease(
                        context=self.context, namespace=self.settings.namespace,
                        name=self.settings.member_lease_name, spec=spec, labels=self.labels,
                        annotations=annotations, timeout=self.timeout)
            else:
                with self.verb('update'):
                    lease = await leases.replace_lease(lease=self.lease, context=self.context, spec=spec,
                                                       labels=self.labels, annotations=annotations,
                                                       timeout=self.timeout)
        except APIConflictError:  # created or changed meanwhile: the next listing tells by whom
            logger.debug("The member lease %s has changed meanwhile; looking again.", self.settings.member_lease_name)
            return
        except APINotFoundError:
            self._lose("Our member lease is gone (the others took it for expired)")
            return
        self.lease = lease
        self.published = ring
        self.fences.renewed(sent)

    async def _collect(self, lease: Lease) -> None:
        """Delete a member lease that has expired (unless it has changed since): that member has stopped."""
        if self.closing:
            return
        try:
            with self.verb('delete'):
                deleted = await leases.delete_lease(lease=lease, context=self.context, timeout=self.timeout)
        except APIConflictError:
            return  # it was renewed meanwhile: not dead after all
        if deleted:
            logger.info("The member %s has left (its lease %s has expired).", lease.spec.holder or '?', lease.name)

    def _lose(self, reason: str) -> None:
        logger.error("%s: stopped handling; joining anew.", reason)
        self.gate.harden()
        self.fences.cancel()
        self._reset()
        self.lease = None

    def _reset(self) -> None:
        self.adopted = ()
        self.published = None
        self.permitted = None

    async def release(self) -> None:
        """Leave: delete our lease, so that the others take our objects over at once."""
        self.fences.cancel()
        self.gate.harden()
        if self.lease is None:
            return
        try:
            await leases.delete_lease(lease=self.lease, context=self.context, timeout=self.timeout)
        except _TRANSIENT as e:
            logger.warning("Cannot delete the member lease %s: %s; the others take over when it expires.",
                           self.settings.member_lease_name, errors.describe(e))
            return
        logger.info("Left the shards: deleted the member lease %s.", self.settings.member_lease_name)


# The entry point for running.py.

class Peering:
    """
    A running replica's coordination: the gate for the handling, and the graceful stepping down.

    The Lease loop runs in a thread with an event loop and an API session of
    its own: synchronous handlers that keep the CPU busy slow the operator's
    event loop down, sometimes by seconds, and the renewals must not wait
    behind the handling they protect. (The fences hold regardless: the gate
    checks its deadlines by the clock.)
    """

    def __init__(self, *, gate: Gate, replica: _Replica, stop: asyncio.Event) -> None:
        self.gate = gate
        self.replica = replica
        self.released = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name='kopf peering', daemon=True)
        self._thread.start()
        self._stopping = asyncio.Event()  # used in the thread's loop only
        self._future = asyncio.run_coroutine_threadsafe(self._lifecycle(), self._loop)
        operator_loop = asyncio.get_running_loop()

        def stop_the_operator(_: object) -> None:  # the coordination is over: so is the handling
            if not operator_loop.is_closed():
                operator_loop.call_soon_threadsafe(stop.set)

        self._future.add_done_callback(stop_the_operator)

    async def _lifecycle(self) -> None:
        """In the thread: run until stopped or failed, then release the Lease."""
        async with self.replica.context:
            run = asyncio.create_task(self.replica.run(), name='kopf peering')
            stopping = asyncio.create_task(self._stopping.wait())
            await asyncio.wait([run, stopping], return_when=asyncio.FIRST_COMPLETED)
            for task in (run, stopping):
                task.cancel()
            await asyncio.gather(run, stopping, return_exceptions=True)
            await self.replica.release()
            error = run.exception() if not run.cancelled() else None
            if error is not None:
                raise error

    async def step_down(self, *, timeout: float) -> None:
        """
        Stop handling and give the Lease up (the operator is stopping).

        The running cycles finish first, while the Lease is still renewed;
        only then is it released, so that the next owner starts right away
        but never while this replica still handles anything.
        """
        if not await self.replica.step_down(timeout=timeout):
            logger.warning("%d handling cycle(s) did not finish within %.1fs of stopping; they are cancelled. "
                           "A synchronous handler among them may still be running when the next owner starts.",
                           self.gate.cycles, timeout)
        await self.release()

    async def release(self) -> None:
        """Stop the Lease loop, release the Lease(s), and end the thread."""
        if self.released:
            return
        self.released = True
        self._loop.call_soon_threadsafe(self._stopping.set)
        with contextlib.suppress(Exception):
            await asyncio.wrap_future(self._future)
        self._loop.call_soon_threadsafe(self._loop.stop)
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
        self._loop.close()

    def error(self) -> PeeringError | None:
        """Why the coordination has failed, if it has."""
        if not self._future.done() or self._future.cancelled() or self._future.exception() is None:
            return None
        error = self._future.exception()
        if error is None or isinstance(error, PeeringError):
            return error
        return PeeringError(f"Coordination with the other replicas has failed: {errors.describe(error)}")


class ReplicaView:
    """
    What other parts of the operator may ask about the replicas: who keeps a shared object, who else is alive.

    Made before the coordination starts (the admission webhooks start
    earlier and stop later than the Leases); until :func:`peering` attaches
    the running replica, this replica keeps nothing. A shared object (e.g.
    the admission webhook configurations) is kept by the replica that would
    handle an object of its key: the HA leader, or the shard that owns the
    key by the ring -- fenced as objects are, so never two replicas at once.
    """

    def __init__(self) -> None:
        self._peers: Peering | None = None
        self._context: APIContext | None = None
        self._attached = asyncio.Event()

    def attach(self, peers: Peering, *, context: APIContext) -> None:
        self._peers = peers
        self._context = context  # the operator's own session: it outlives the Leases' thread
        self._attached.set()

    @property
    def identity(self) -> str | None:
        return self._peers.replica.settings.identity if self._peers is not None else None

    def steward(self, key: str) -> bool:
        return self._peers is not None and self._peers.gate.admits(key)

    @property
    def revision(self) -> int:
        return self._peers.gate.revision if self._peers is not None else 0

    async def revised(self, revision: int) -> None:
        if self._peers is None:
            await self._attached.wait()
        else:
            await self._peers.gate.revised(revision)

    @property
    def handover_timeout(self) -> float:
        return float(self._peers.replica.settings.lease_duration) if self._peers is not None else 0.0

    async def alone(self) -> bool:
        """
        At the exit (the Lease is given up): whether no other replica is alive.

        Shards: no other live member in the last listing. HA: standbys hold no
        Lease, so the released Lease is watched: a standby takes it within
        a retry period or two; if nobody does, this replica was the last.
        """
        if self._peers is None or self._context is None:
            return True
        replica = self._peers.replica
        if isinstance(replica, _Member):
            return not replica.live_others
        settings = replica.settings
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2.5 * settings.retry_period  # a standby reads it every retry period
        while True:
            try:
                lease = await leases.read_lease(context=self._context, namespace=settings.namespace,
                                                name=settings.name, timeout=settings.request_timeout)
            except _TRANSIENT as e:
                logger.warning("Cannot read the lease %s/%s: %s.",
                               settings.namespace, settings.name, errors.describe(e))
                lease = None
            holder = lease.spec.holder if lease is not None else None
            if holder and holder != settings.identity:
                return False
            if loop.time() >= deadline:
                return True
            await asyncio.sleep(settings.retry_period / 4)


@contextlib.asynccontextmanager
async def peering(
        *,
        context: APIContext,
        config: PeeringConfig,
        namespaces: Collection[NamespaceSpec],
        clusterwide: bool,
        stop: asyncio.Event,
        view: ReplicaView | None = None,
) -> AsyncIterator[Peering | None]:
    """
    Coordinate with the other replicas while the operator runs; ``None`` for standalone operators.

    A fatal problem (e.g. RBAC forbids the Lease verbs) stops the operator
    and is raised as :class:`PeeringError` when the context exits.
    """
    if config.mode == 'standalone':
        if config.priority:
            logger.info("The priority %d has no effect: this operator is standalone. Priorities rank the replicas "
                        "of one lease: run them with --peering NAME (or --ha).", config.priority)
        yield None
        return
    if config.mode == 'shards' and config.priority:
        logger.info("The priority %d has no effect with --shards: every member handles its share of the objects; "
                    "priorities rank the replicas of one lease (--peering NAME or --ha).", config.priority)
    settings = resolve(config, namespaces=namespaces, clusterwide=clusterwide,
                       default_namespace=context.info.default_namespace)
    if getattr(context, 'custom_session', False):
        raise PeeringError(
            "The login handlers gave a session of their own (kopf.AiohttpSession), but the Leases of "
            f"--{settings.mode} are renewed from a thread with a session of its own, made from the credentials. "
            "Return kopf.ConnectionInfo from the login handlers to run replicas.")
    await _check_access(context, settings)
    gate = Gate()
    cls = _Elector if settings.mode == 'ha' else _Member
    own_context = APIContext(context.info, retries=0)  # a session of its own, opened in the peering thread
    replica: _Replica = cls(context=own_context, gate=gate, settings=settings)
    logger.info("Coordinating as %s (%s) through the lease(s) %r in the namespace %r.",
                settings.identity, 'HA' if settings.mode == 'ha' else 'shards', settings.name, settings.namespace)
    peers = Peering(gate=gate, replica=replica, stop=stop)
    if view is not None:
        view.attach(peers, context=context)
    try:
        yield peers
    finally:
        await peers.release()
    error = peers.error()
    if error is not None:
        raise error


async def _check_access(context: APIContext, settings: PeeringSettings) -> None:
    """Fail at start, naming the verbs, if RBAC forbids what this mode needs on Leases."""
    denied = await access.denied_verbs(context=context, verbs=VERBS[settings.mode], group=leases.GROUP,
                                       resource=leases.PLURAL, namespace=settings.namespace,
                                       timeout=settings.request_timeout)
    if denied:
        raise PeeringError(
            f"RBAC forbids to {', '.join(denied)} {leases.RESOURCE} in the namespace {settings.namespace!r}, "
            f"which --{settings.mode} needs ({', '.join(VERBS[settings.mode])}). Grant these verbs to the "
            f"operator's account (see the Role in docs/install.rst), or choose another namespace with "
            f"--lease-namespace.")


