"""The worker side: the consumer bootsteps that apply the pause, the gate every task
passes, the one owner of what the worker applied and read (:mod:`.state`, read through
the frozen :mod:`.snapshot`), the thread that reads the store and reports, and the monitor."""
