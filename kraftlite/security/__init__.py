"""The trust boundary: the cluster credential between nodes, and (later) client principals."""
