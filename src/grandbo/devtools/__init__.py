"""Developer tooling for Grandbo's tests and benchmarks; not used by the service at runtime."""
