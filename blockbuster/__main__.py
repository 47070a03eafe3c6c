"""``python -m blockbuster ...``: see :mod:`blockbuster.cli`."""

from blockbuster.cli import main

raise SystemExit(main())
