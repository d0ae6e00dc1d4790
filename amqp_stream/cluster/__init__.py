"""Several nodes: streams replicated across nodes, coordinated by ZooKeeper (docs/cluster.md).

One node stays the default and imports nothing from here. The package splits by role, as
osiris splits writer / replica / replica reader:

- ``layout``: what every role agrees on — a node's advertised addresses and a stream's
  members, leader and epoch (plain values; no I/O).
- coordination (ZooKeeper through kazoo; the only module that talks to it), placement
  (leader locators), the leader's side of replication (serving chunks, counting acks, the
  commit offset) and the replica's side (fetching, appending, truncating) each in a file
  of its own.

The core asks this package where a stream's leader and members are and when a publish is
committed; it never talks to ZooKeeper itself.
"""
