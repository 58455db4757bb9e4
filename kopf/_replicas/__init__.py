"""
Replicas of one operator: high availability and sharding over ``coordination.k8s.io/v1`` Leases.

The tour:

* :mod:`.peering` is the entry point: each replica holds its Lease (HA: one
  leader; shards: one per member), renews it, and decides what it may do;
* :mod:`.ownership` says which member owns which object (rendezvous hashing
  of the uid over the live members);
* :mod:`.fencing` is the gate between the watch streams and the handling:
  only owned objects are handled, and a hand-over waits until the old owner
  has stopped (its cycles and daemons) or its Lease has expired;
* :mod:`.freezing` handles priorities and Kopf's ``kopf freeze``/``resume``;
* :mod:`.leases` is the Lease API itself.

Guarantees: an object is handled by one replica at a time, also while a
replica is cut off; progress lives with the object, so a hand-over re-runs
nothing.
"""
