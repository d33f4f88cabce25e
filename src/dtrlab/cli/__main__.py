"""`python -m dtrlab.cli`: the dtrlab command."""

from . import main

main()
