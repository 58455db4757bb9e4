"""
In-memory indexes of objects, given to every handler by the index's name.

The tour:

* :mod:`.indexing` is the operator's indexes for one run
  (:class:`~.indexing.OperatorIndexes`): what the runtime feeds the watch
  streams through and tells which listings to wait for, and what handlers
  get; it puts the other modules together;
* :mod:`.streams` indexes every event before the stream passes it on: it
  calls the index functions and applies what the decisions say;
* :mod:`.catalog` is the mapping of names to indexes that handlers get,
  with the writers and the functions' failures per object;
* :mod:`.readiness` (which listings are still awaited, what each stream has
  indexed) and :mod:`.failures` (what a failing index function does to the
  object's values) are decisions only: no I/O, no time but the one given;
* :mod:`.indexes` is one index as handlers see it, and its writer.

Guarantees: handlers of objects are called only once every index is
filled from the initial listings; an index function that fails leaves the
object's previous entries, as its ``errors=`` says.
"""
