"""Black-box AMQP 1.0 conformance tests for stream brokers (see README.md)."""
