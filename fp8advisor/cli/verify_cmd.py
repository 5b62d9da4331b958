"""`fp8advisor verify`: placeholder until its issue lands."""
