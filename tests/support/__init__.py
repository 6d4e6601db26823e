"""Support code shared by the test suites (servers, the fault-injecting proxy, checks)."""
