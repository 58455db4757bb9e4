"""
The handling cycle: one object, one watch event, one patch.

The tour, from the watch stream down:

* :mod:`.queueing` gives each object a worker of its own: its events are
  handled in order, never two at a time, and the echoes of our own patches
  are skipped;
* :mod:`.processing` handles one event: it runs the cycle, sends its patch,
  and deals with the API's refusals so that no progress is lost;
* :mod:`.cycle` is the cycle itself, a table from cause to action, with the
  persistence guarantees written in its docstring;
* :mod:`.causation` decides the cause (create, update, delete, resume, ...),
  :mod:`.selection` which handlers it concerns, :mod:`.scheduling` which of
  them run now within the cycle's time budget;
* :mod:`.failures` keeps repeated failures out of the log.

The handlers themselves, their arguments, retries and progress are in
:mod:`kopf._handlers`; the state between cycles in :mod:`kopf._storage`.
Daemons and indexes plug into the cycle (as a stage, and as the handlers'
indexes) without the cycle knowing them.
"""
