"""What the test suite and the benchmark share: the test app, real worker subprocesses,
private redis-servers, and polling with a deadline. Not part of the package."""
