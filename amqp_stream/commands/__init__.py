"""One module per ``amqp-stream`` subcommand; see ``amqp_stream.cli``."""
