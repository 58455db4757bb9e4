"""
Handlers: how they are declared, what they get, how one attempt is judged, and where each stands.

The tour:

* :mod:`.registries` describes the handlers of every kind and keeps them,
  by the resources they serve, each kind in a :mod:`.tables` table (with
  the kind's rule against duplicates); :mod:`.declaring` is what every
  decorator of ``kopf.on`` does with its options (checks them, makes the
  handler and its id); :mod:`.filters` decides which objects a handler is
  interested in; :mod:`.reasons` names the causes handlers are declared for;
* :mod:`.arguments` builds the keyword arguments of each kind of handler (as
  Kopf's), :mod:`.invocation` calls a sync or async function with them,
  :mod:`.loggers` is the per-object logger they get;
* :mod:`.execution` makes one attempt and judges its outcome by the retry
  policy (errors, timeouts, back-off); :mod:`.progression` is where each
  handler of a cause stands across attempts;
* :mod:`.subhandling` lets a handler declare sub-handlers at runtime;
  :mod:`.lifecycles` chooses which of the due handlers run now.

Nothing here talks to the API or sleeps: the cycle, the daemons and the
runtime call into this package.
"""
