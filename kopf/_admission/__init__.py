"""
Admission webhooks: the API server asks the operator before it stores a change.

The tour:

* :mod:`.serving` is the entry point: for the operator's lifetime, it runs a
  webhook server and keeps the cluster's webhook configurations pointed at
  it (with replicas, one of them -- the steward -- keeps them);
* :mod:`.servers` are the servers that reviews arrive at (a local HTTPS
  server, a Kubernetes Service in front of the replicas, tunnels);
  :mod:`.certificates` makes self-signed certificates for them;
* :mod:`.handling` answers one review: it runs the matching validating and
  mutating handlers and turns their outcome into the response;
* :mod:`.configurations` reads and writes the managed
  ``ValidatingWebhookConfiguration``/``MutatingWebhookConfiguration``.

The review's wire format and the vocabulary that handlers are declared with
(:mod:`kopf._structs.reviews`) are data, below this package. Guarantees: a
handler that fails rejects the change with its message (admission errors
first); a review of a resource or namespace that the operator does not
serve is admitted untouched; the configurations are removed only when the
last replica exits.
"""
