"""`fp8advisor bench`: placeholder until its issue lands."""
