"""
The holder's own deadlines after each successful renewal of its Lease, struck on the injected clock.

* ``renew_deadline - retry_period`` after the last renewal: the soft fence --
  no new handling cycles, and the cycles that have not begun to patch are
  cancelled;
* ``renew_deadline``: the hard fence -- every cycle is cancelled, no write is
  sent;
* ``lease_duration``: only now may another replica regard the Lease as expired.

The gate (:class:`.fencing.Gate`) checks the first two by the clock at every
admission and write, so they hold even if nothing here runs in time; the
timers here only cancel the running cycles at those moments, and say so.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kopf._replicas.fencing import Gate
from kopf._replicas.settings import PeeringSettings
from kopf._structs.clocks import SYSTEM_CLOCK, Clock

logger = logging.getLogger('kopf._replicas.peering')


class Fences:
    """The deadlines that follow from the last successful renewal, and the timers that strike them."""

    def __init__(self, gate: Gate, settings: PeeringSettings, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.gate = gate
        self.settings = settings
        self.clock = clock
        self.renewed_at: float | None = None
        self._timers: list[asyncio.Task[None]] = []

    @property
    def lost(self) -> bool:
        """Whether the renew deadline has passed since the last renewal (if there was one)."""
        return self.renewed_at is not None and self.clock.monotonic() >= self.renewed_at + self.settings.renew_deadline

    def renewed(self, sent_at: float) -> None:
        """A renewal sent at this (monotonic) time has succeeded: the deadlines move on (in the Lease loop)."""
        self.cancel()
        self.renewed_at = sent_at
        self.gate.extend(admit_until=sent_at + self.settings.soft_fence,
                         write_until=sent_at + self.settings.renew_deadline)
        self._timers = [
            asyncio.create_task(self._strike(sent_at + self.settings.soft_fence, self._soften),
                                name='kopf soft fence'),
            asyncio.create_task(self._strike(sent_at + self.settings.renew_deadline, self._harden),
                                name='kopf hard fence'),
        ]

    def cancel(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers = []

    async def _strike(self, moment: float, fence: Callable[[], None]) -> None:
        await self.clock.sleep(max(0.0, moment - self.clock.monotonic()))
        fence()

    def _soften(self) -> None:
        cancelled = self.gate.soften()
        logger.warning("The lease has not been renewed for %.1fs; no new handling (%d cycle(s) cancelled).",
                       self.settings.soft_fence, cancelled)

    def _harden(self) -> None:
        self.gate.harden()
        logger.error("The lease has not been renewed within the renew deadline of %.1fs: stopped handling "
                     "before it can expire (in %.1fs) and another replica takes over; trying to renew it.",
                     self.settings.renew_deadline, self.settings.lease_duration - self.settings.renew_deadline)
