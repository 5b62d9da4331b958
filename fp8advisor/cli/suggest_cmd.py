"""`fp8advisor suggest`: placeholder until its issue lands."""
