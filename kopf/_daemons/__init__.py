"""
Daemons and timers: per-object tasks that run beside the handling cycle.

Guarantees: one run of a daemon per object at a time, also across replicas
(a hand-over waits for it to stop); a stop is asked with the ``stopped`` flag,
then escalated to cancellation after the daemon's timeouts; every delay,
interval and timeout is timed by the keeper's clock.

From the top down:

* :mod:`.keeper` -- which objects have which daemons and timers: a stage of
  the handling cycle that starts what an object needs and asks to stop what
  it no longer needs, holds an object's deletion while they stop, follows a
  replica's fence, and stops everything at the exit.
* :mod:`.loops` -- the life of one daemon or timer of one object, from the
  initial delay to its end: a thin executor of :mod:`.schedule`'s decisions.
* :mod:`.stopping` -- the steps after a stop is asked (cancel, report,
  abandon): a thin executor of :mod:`.escalation`'s decisions.
* :mod:`.calls` -- one call of a daemon or timer: its keyword arguments, the
  call (in a thread of its own for a plain daemon), its outcome judged as
  every handler's, and its patch applied to the object.
* :mod:`.objects` -- what the keeper holds: an object's latest body as live
  views, and per daemon or timer its task and stop.
* :mod:`.waiting` -- waiting for something or for a time, whichever comes
  first, by the clock.
* :mod:`.escalation` and :mod:`.schedule` -- pure decisions by the clock:
  the next step of a stop; when a daemon or timer is due.
"""
