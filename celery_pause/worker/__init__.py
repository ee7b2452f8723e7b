"""The worker side: the consumer bootsteps that apply the pause, the gate every task
passes, the thread that reads the store and reports, and the monitor."""
