"""`python -m fp8advisor ...`: the command line without an installed entry point (e.g. from a checkout on
PYTHONPATH)."""

from fp8advisor.cli import main

if __name__ == "__main__":
    main()
