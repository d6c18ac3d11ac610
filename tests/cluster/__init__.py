"""Redis Cluster specifics on a real 3-primary, 3-replica cluster."""
