"""
Replicas of one operator: high availability and sharding over ``coordination.k8s.io/v1`` Leases.

The tour, from the entry point down:

* :mod:`.peering` is what the runtime enters: it starts the coordination
  in a thread of its own and steps down gracefully at the exit;
* :mod:`.view` answers the rest of the operator (the admission webhooks):
  who keeps a shared object, and whether any other replica is alive;
* the executors -- :mod:`.elector` (HA) and :mod:`.member` (shards), on the
  loop of :mod:`.replica` -- read and write the Leases each retry period,
  apply the decisions to the gate, log, and sleep on the injected clock;
  :mod:`.freezing` holds the commands ``kopf freeze`` and ``kopf resume``;
* the decisions are pure: :mod:`.election` (HA: renew, take over, stand by,
  refuse a duplicate identity) and :mod:`.sharding` (the live members, their
  rings, the hand-overs, the permit); :mod:`.deadlines` strikes the fences
  that follow every renewal;
* :mod:`.fencing` is the gate between the watch streams and the handling:
  only permitted objects are handled, and a hand-over waits until the old
  owner has stopped (its cycles and daemons) or its Lease has expired;
  :mod:`.observations` judges Leases by renew-time semantics (and tells
  namesakes apart); :mod:`.priorities` says what priorities and freezes
  mean; :mod:`.ownership` says which member owns which object (rendezvous
  hashing of the uid over the live members);
* :mod:`.leases` is the Lease API itself, and :mod:`.settings` what a
  replica coordinates with.

Guarantees: an object is handled by one replica at a time, also while a
replica is cut off; progress lives with the object, so a hand-over re-runs
nothing.
"""
