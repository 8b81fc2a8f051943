"""`python -m gateway`: see gateway.main."""

from gateway.main import main

main()
