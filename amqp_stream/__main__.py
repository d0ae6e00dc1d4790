from amqp_stream.cli import main

raise SystemExit(main())
