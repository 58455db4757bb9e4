"""
Reconciliation: level-based handlers that make the world match an object, whenever it or its children change.

``@kopf.on.reconcile(resource, owns=[...], watches={...: mapper})`` is called
with the object's current state -- not with what happened to it -- when the
object appears or changes, when one of its children (or a related object)
changes, after ``resync`` seconds, and when it asks for it
(``kopf.Requeue``); calls are coalesced, never concurrent for one object, and
backed off per object when they fail.

The tour:

* :mod:`.planning` is the queue of one object as pure decisions: when the
  next call is due (coalescing, back-off, requeue, resync), and what a call's
  outcome changes;
* :mod:`.links` is the bookkeeping of which objects belong to which owners,
  with their latest bodies: the ``children`` that handlers get;
* :mod:`.reconciler` is the executor for one resource: a stage of the
  handling cycle that sees the owners' events, a scheduler, the calls, their
  patches, and the back-off records in the progress storage;
* :mod:`.reconciling` puts them together for one run of the operator: the
  startup check of ``owns=``/``watches=``, the children seen in the watch
  streams, and the readiness of their first listings.

Guarantees: one call at a time per object; a burst of changes is one call;
a failing call never holds up other objects, and its back-off survives a
restart (it is kept in the progress storage); with ``--shards``, an object
is reconciled only by the replica that owns it, whichever replica its
children's own uids would go to. The children are read from the operator's
own watch streams -- no request per call.
"""
