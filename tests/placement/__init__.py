"""Placement tests: filters, scorers, devices, gangs, topology, victims, index properties."""
