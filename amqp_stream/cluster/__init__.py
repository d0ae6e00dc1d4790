"""Several nodes: streams replicated across nodes, coordinated by ZooKeeper (docs/cluster.md).

One node stays the default and imports nothing from here. The package splits by role, as
osiris splits writer / replica / replica reader:

- ``layout``: what every role agrees on — a node's advertised addresses and a stream's
  members, leader and epoch (plain values; no I/O).
- ``address``: the cluster's ``zk://HOSTS/PATH`` and node names, checked without kazoo;
- ``placement``: a new stream's members and leader (the leader locators), pure functions;
- ``coordination``: ZooKeeper through kazoo, the only module that talks to it (membership,
  layouts, tail reports, elections, the definitions store);
- ``node``: ``ClusterNode``, the core's side (declare/delete, views applied on the loop,
  hooks when a leader moves);
- the leader's side of replication (serving chunks, counting acks, the commit offset) and
  the replica's side (fetching, appending, truncating) each in a file of its own.

The core asks this package where a stream's leader and members are and when a publish is
committed; it never talks to ZooKeeper itself.
"""
