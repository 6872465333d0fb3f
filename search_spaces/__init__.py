"""Search-space YAML files, one per workload, shipped as package data (see README.md here)."""
