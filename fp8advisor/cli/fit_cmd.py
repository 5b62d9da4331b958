"""`fp8advisor fit`: placeholder until its issue lands."""
