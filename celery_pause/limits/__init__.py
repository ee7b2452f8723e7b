"""What paces task starts: rates (rising ones too: ramps), slots and per-label partitions.

The gate hands every request a limit covers to :class:`~.pacing.Pacing` and asks
it what may start; the store thread feeds it the permits :class:`~.keeper.LimitKeeper`
earns from the store. Nothing here reads the pause state or talks to Celery's consumer.
"""
