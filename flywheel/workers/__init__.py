"""Role workers (Ray actors) and the strategies (backends) they drive."""
