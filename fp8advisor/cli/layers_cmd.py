"""`fp8advisor layers`: placeholder until its issue lands."""
