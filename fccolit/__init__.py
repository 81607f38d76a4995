"""fccolit."""
