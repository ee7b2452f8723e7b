"""The HTTP side: a small threaded server, the worker's health probes and Prometheus
metrics, and the operator's authenticated admin API with its status page."""
