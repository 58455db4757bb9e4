"""
Daemons and timers: per-object tasks that run beside the handling cycle.

:mod:`.daemons` keeps, per resource, the daemons and timers of every object:
it is a stage of the handling cycle (it sees every event, starts what an
object needs, asks to stop what it no longer needs), and holds an object's
deletion until its daemons have stopped. Guarantees: one run of a daemon per
object at a time, also across replicas (a hand-over waits for it to stop);
a stop is asked with the ``stopped`` flag, then escalated to cancellation
after the daemon's timeouts.
"""
