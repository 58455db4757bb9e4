"""
In-memory indexes of objects, given to every handler by the index's name.

:mod:`.indexing` keeps the operator's indexes current from the watch streams
(every event is indexed before it is handled) and knows when the initial
listings have filled them; :mod:`.indexes` is the index itself, as handlers
see it. Guarantees: handlers of objects are called only once every index is
filled from the initial listings; an index function that fails leaves the
object's previous entries, as its ``errors=`` says.
"""
