"""The circuit breaker: pauses what it guards when a dependency fails, probes once for
the whole cluster, and resumes when it recovers.

Split by where the code runs: :mod:`.circuit` and :mod:`.record` everywhere, :mod:`.task`
in the pool processes, :mod:`.admission` on the consumer loop, :mod:`.agent` on its own
thread in each worker (started by :mod:`.step`), :mod:`.status` in the operator's tools.
"""
